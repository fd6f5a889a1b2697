"""A rule whose counters moved is the same rule: only new rules are leaks."""

from tests.harness.hostsnap import _strip_handles


def test_counters_and_handles_do_not_make_a_rule_new():
    before = [{"xt": {"type": "match", "name": "addrtype"}}, {"counter": {"packets": 1, "bytes": 60}},
              {"jump": {"target": "CNI-HOSTPORT-DNAT"}}]
    after = [{"xt": {"type": "match", "name": "addrtype"}}, {"counter": {"packets": 2657, "bytes": 159941}},
             {"jump": {"target": "CNI-HOSTPORT-DNAT"}}]
    assert _strip_handles(before) == _strip_handles(after)
    assert _strip_handles({"handle": 4, "expr": before}) == _strip_handles({"handle": 9, "expr": after})


def test_a_different_target_is_a_different_rule():
    a = [{"counter": {"packets": 1, "bytes": 60}}, {"jump": {"target": "A"}}]
    b = [{"counter": {"packets": 1, "bytes": 60}}, {"jump": {"target": "B"}}]
    assert _strip_handles(a) != _strip_handles(b)
