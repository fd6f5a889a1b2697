from fractions import Fraction

import pytest

from nodeagent.api.quantity import QuantityError, format_quantity, int_value, milli_value, parse_quantity


@pytest.mark.parametrize("s,expected", [
    ("100m", Fraction(1, 10)), ("1", 1), ("1.5", Fraction(3, 2)), ("1Ki", 1024), ("1.5Gi", 3 * 2**29),
    ("2e3", 2000), ("1E-3", Fraction(1, 1000)), ("500M", 500_000_000), ("10k", 10_000),
    ("1n", Fraction(1, 10**9)),
    (".5", Fraction(1, 2)), ("+2", 2), ("-1", -1), (3, 3),
])
def test_parse(s, expected):
    assert parse_quantity(s) == expected


@pytest.mark.parametrize("bad", ["", "abc", "1Kb", "1.2.3", "m", "1 Gi", "1KI"])
def test_rejects(bad):
    with pytest.raises(QuantityError):
        parse_quantity(bad)


def test_rounding_up_like_kubernetes():
    assert milli_value("0.0001") == 1
    assert milli_value("250m") == 250
    assert int_value("0.5") == 1
    assert int_value("128Mi") == 128 * 2**20


def test_format():
    assert format_quantity(parse_quantity("1024Mi"), binary=True) == "1Gi"
    assert format_quantity(parse_quantity("100m")) == "100m"
    assert format_quantity(2000) == "2k"
    assert format_quantity(0) == "0"
