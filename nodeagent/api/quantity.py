"""Kubernetes resource quantities ("100m", "1.5Gi", "2e3") as exact fractions.

One parser for every component that reasons about resources (scheduler fit,
quota, QoS, cgroup limits), with Kubernetes' rounding: values are rounded up
to the requested scale, as resource.Quantity.MilliValue/Value do.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
            "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
            "P": Fraction(10**15), "E": Fraction(10**18)}
_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$")


class QuantityError(ValueError):
    """Not a valid quantity; the message is what the apiserver puts in the field cause."""


def parse_quantity(value: str | int | float) -> Fraction:
    """The exact value of a quantity string (or a bare number)."""
    if isinstance(value, bool):
        raise QuantityError(f"quantities must match the regular expression: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    return _parse_str(str(value))


@functools.lru_cache(maxsize=4096)
def _parse_str(value: str) -> Fraction:
    """Cached: objects repeat the same few quantity strings, and parsing is the costly part (Fractions are
    immutable)."""
    s = value.strip()
    m = _RE.match(s)
    if not m:
        raise QuantityError(
            "quantities must match the regular expression "
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    number, exponent, suffix = m.groups()
    base = Fraction(number)
    if exponent:
        return base * Fraction(10) ** int(exponent[1:])
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    return base * _DECIMAL[suffix or ""]


def milli_value(value: str | int | float) -> int:
    """The quantity in thousandths, rounded up (cpu "100m" -> 100, "1" -> 1000)."""
    return math.ceil(parse_quantity(value) * 1000)


def int_value(value: str | int | float) -> int:
    """The quantity as an integer, rounded up (memory "1Ki" -> 1024, "0.5" -> 1)."""
    return math.ceil(parse_quantity(value))


def format_quantity(value: Fraction | int, binary: bool = False) -> str:
    """A canonical short form: binary suffixes for byte-like values, decimal otherwise."""
    v = Fraction(value)
    if v == 0:
        return "0"
    if v.denominator != 1:
        milli = v * 1000
        if milli.denominator == 1:
            return f"{milli.numerator}m"
        return f"{math.ceil(milli)}m"
    n = v.numerator
    if binary:
        for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
            if n % _BINARY[suffix] == 0:
                return f"{n // _BINARY[suffix]}{suffix}"
        return str(n)
    for suffix in ("E", "P", "T", "G", "M", "k"):
        f = _DECIMAL[suffix]
        if n % f.numerator == 0:
            return f"{n // f.numerator}{suffix}"
    return str(n)
