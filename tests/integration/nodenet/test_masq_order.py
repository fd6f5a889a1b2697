"""The cluster masquerade exemption goes after the Service proxy's POSTROUTING jump, in whatever order the
two start: before it, a pod reaching itself through its Service (hairpin) is not masqueraded and hangs."""

from __future__ import annotations

import pytest

from nodeagent.nodenet import masq
from tests.integration.nodenet.nsutil import in_ns

pytestmark = [pytest.mark.root]

CIDR, NODE = "10.244.0.0/16", "n1"
JUMP = ["-m", "comment", "--comment", masq.PROXY_JUMP_COMMENT, "-j", "KUBE-POSTROUTING"]


def postrouting(ns: str) -> list[str]:
    out = in_ns(ns, lambda: masq._iptables("-S", "POSTROUTING").stdout)
    return [line for line in out.splitlines() if line.startswith("-A POSTROUTING")]


def kind(rule: str) -> str:
    return "proxy" if masq.PROXY_JUMP_COMMENT in rule else "ours" if "nodeagent/nodenet" in rule else "other"


@pytest.fixture
def ns(res):
    name = res.netns()
    in_ns(name, lambda: masq._iptables("-N", "KUBE-POSTROUTING"))
    yield name
    in_ns(name, lambda: masq._iptables("-F", "POSTROUTING"))  # the netns goes with the fixture


def test_after_a_proxy_jump_that_came_first(ns):
    # a CNI rule
    in_ns(ns, lambda: masq._iptables("-A", "POSTROUTING", "-s", "10.1.0.0/24", "-j", "MASQUERADE"))
    in_ns(ns, lambda: masq._iptables("-I", "POSTROUTING", "1", *JUMP))
    in_ns(ns, lambda: masq.ensure(CIDR, NODE))
    assert [kind(r) for r in postrouting(ns)] == ["proxy", "ours", "other"]
    in_ns(ns, lambda: masq.ensure(CIDR, NODE))  # idempotent
    assert [kind(r) for r in postrouting(ns)] == ["proxy", "ours", "other"]


def test_first_without_a_proxy_and_moved_behind_one_put_above_it(ns):
    in_ns(ns, lambda: masq.ensure(CIDR, NODE))
    assert [kind(r) for r in postrouting(ns)] == ["ours"]
    in_ns(ns, lambda: masq._iptables("-A", "POSTROUTING", *JUMP))  # the proxy's jump, but after ours
    in_ns(ns, lambda: masq.ensure(CIDR, NODE))
    assert [kind(r) for r in postrouting(ns)] == ["proxy", "ours"]
    in_ns(ns, lambda: masq.remove(CIDR, NODE))
    assert [kind(r) for r in postrouting(ns)] == ["proxy"]
