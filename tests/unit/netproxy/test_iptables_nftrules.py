"""iptables rule specs → iptables-nft's expressions, without a kernel (the layout itself is checked
against iptables-nft-restore in tests/integration/netproxy/test_iptnft.py)."""

import pytest

from kernel import nftables as nl
from netproxy.iptables import nftrules
from netproxy.iptables.plan import base_rules, jump_rules, plan_port
from netproxy.model import Endpoint, ServicePort, ServicePortName
from netproxy.proxier import NodeConfig

SPECS = [
    "-j KUBE-SEP-ABC",
    "-s 10.244.1.2/32 -j KUBE-MARK-MASQ",
    "-m tcp -p tcp -j DNAT --to-destination 10.244.1.2:8080",
    "-m udp -p udp -j DNAT --to-destination 10.244.1.2:53",
    "-m sctp -p sctp -j DNAT --to-destination 10.244.1.2:80",
    "-m statistic --mode random --probability 0.3333333333 -j KUBE-SEP-ABC",
    '-m comment --comment "ns/a:http cluster IP" -m tcp -p tcp -d 10.96.0.1/32 --dport 80 -j KUBE-SVC-ABC',
    '-m comment --comment "ns/a:http cluster IP" -m udp -p udp -d 10.96.0.1/32 --dport 53 '
    "! -s 10.240.0.0/12 -j KUBE-MARK-MASQ",
    '-m comment --comment "ns/a:http cluster IP" -m tcp -p tcp -d 10.96.0.1/32 --dport 80 '
    "! -s 10.244.0.0/16 -j KUBE-MARK-MASQ",
]


@pytest.fixture(autouse=True, params=[False, True], ids=["no-counters", "counters"])
def counters(request):
    """Every test with and without per-rule counters (the templates are rebuilt on each switch)."""
    nftrules.use_counters(request.param)
    yield request.param
    nftrules.use_counters(False)


def _exprs(data: bytes) -> list[str]:
    return [nl.attr_str(nl.parse_attrs(e)[nl.EXPR_NAME]) for _, e in nl.parse_list(data)]


@pytest.mark.parametrize("spec", SPECS)
def test_fast_paths_equal_the_general_encoder(spec):
    tokens = nftrules._split(spec)
    fast = nftrules._fast_dispatch(tokens) if '"' in spec else nftrules._fast(tokens)
    assert fast is not None, "this shape should take a fast path"
    assert fast == nftrules._general(tokens, spec)
    assert nftrules._encode(spec) == fast  # including the prefix-only path
    if '"' not in spec and " -p sctp" not in spec:
        assert nftrules._prefixed(spec) == fast


def test_expression_order_is_iptables_nft_order(counters):
    exprs, compat = nftrules.encode(SPECS[7])
    # l4proto, saddr (a bit prefix: load 4, mask), daddr, comment, dport, counter, verdict
    assert _exprs(exprs) == ["meta", "cmp", "payload", "bitwise", "cmp", "payload", "cmp", "match", "payload",
                             "cmp", *(["counter"] if counters else []), "immediate"]
    assert compat == nl.rule_compat(17)
    exprs, _ = nftrules.encode(SPECS[8])  # a byte prefix: two bytes loaded, no bitwise
    assert "bitwise" not in _exprs(exprs)


def test_every_planned_shape_encodes(counters):
    node = NodeConfig(node_name="n1", cluster_cidr="10.244.0.0/16")
    sp = ServicePort(ServicePortName("ns", "a", "http"), "10.96.0.1", 80, "TCP", node_port=30080,
                     external_ips=("192.0.2.1",), affinity_timeout=60, external_local=True, type="NodePort")
    eps = [Endpoint("10.244.1.2", 8080, node_name="n1"), Endpoint("10.244.1.3", 8080)]
    specs = [s for p in (plan_port(sp, eps, node), plan_port(sp, [], node))
             for v in (*p.chains.values(), *p.dispatch.values()) for s in v]
    specs += [s for v in base_rules(node).values() for s in v] + [s for _, _, s in jump_rules(node)]
    for spec in specs:
        exprs, _ = nftrules.encode(spec)
        names = _exprs(exprs)
        assert names[-2:-1] == ["counter"] if counters else "counter" not in names, spec


@pytest.mark.parametrize("spec", ["-m owner --uid-owner 0 -j ACCEPT", "-j LOG", "-i eth0 -j ACCEPT"])
def test_unknown_vocabulary_is_refused(spec):
    with pytest.raises(nftrules.UnsupportedRule):
        nftrules._encode(spec)


@pytest.mark.parametrize("spec", [*SPECS, "-j KUBE-SEP-ABCDEFGHIJKLMNOP",
                                  "-m tcp -p tcp -j DNAT --to-destination 10.1.2.3",
                                  '-m comment --comment "' + "x" * 300 + '" '
                                  "-m tcp -p tcp -d 10.96.0.1/32 --dport 80 -j KUBE-SVC-ABC",
                                  "-m tcp -p tcp -j DNAT --to-destination 10.1.2.3:80 --random",
                                  "-s 10.0.0.0/8 -j KUBE-MARK-MASQ", "-j ACCEPT", "-j MARK --or-mark 0x4000"])
def test_rule_bodies_equal_the_general_encoder(spec):
    """nftrules.body (templates spliced for the large-cluster shapes) = the expressions nest + compat
    of the general encoder, byte for byte."""
    exprs, compat = nftrules._general(nftrules._split(spec), spec)
    assert nftrules.body(spec) == nl.attr(nl.RULE_EXPRESSIONS | nl.NLA_F_NESTED, exprs) + compat


def test_batch_segments_keep_messages_whole():
    """A batch larger than a segment: every message is read back whole from its segment."""
    b = nl.Batch("nat")
    specs = [f"-s 10.0.{i // 250}.{i % 250}/32 -j KUBE-MARK-MASQ" for i in range(20000)]
    b.append_rules("KUBE-SEP-X", specs, nftrules.body)
    b.add_rule("KUBE-SEP-X", *nftrules.encode(specs[0]))
    assert len(b.segments) >= 2 and b.size == sum(len(x) for x in b.buffers())
    for i in (0, 1, len(specs) // 2, len(specs)):
        mtype, _, attrs = b.msgs[i]
        got = nl.parse_attrs(attrs)
        assert mtype & 0xFF == nl.NEWRULE and nl.attr_str(got[nl.RULE_CHAIN]) == "KUBE-SEP-X"
        assert nl.attr(nl.RULE_EXPRESSIONS | nl.NLA_F_NESTED, got[nl.RULE_EXPRESSIONS]) == \
            nftrules.body([*specs, specs[0]][i])
