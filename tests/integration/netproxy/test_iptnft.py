"""The iptables mode's nf_tables writer produces exactly what iptables-nft itself would.

For one planned ruleset covering every rule shape netproxy writes (ClusterIP over TCP, UDP and
SCTP, affinity, NodePort/externalIP/LoadBalancer, Local policy with and without local
endpoints, no endpoints, large-cluster mode, byte- and bit-aligned pod CIDRs, node IPs or
`addrtype LOCAL`), the writer's table and `iptables-nft-restore` of the same plan text are
compared in two fresh namespaces: by `iptables-nft-save` and by a raw netlink dump of every
rule's expressions (counters and handles aside). Then iptables-nft must still be able to edit
the writer's table, one-Service changes must land where a full load of the new plan would put
them, and cleanup must leave nothing of ours.
"""

import struct
import subprocess

import pytest

from kernel import nftables as nl
from kernel.netns import NetnsWorker
from netproxy.iptables import nftrules
from netproxy.iptables.nftproxier import CHUNK, IptablesNftProxier
from netproxy.iptables.plan import PortRules, full_restore, jump_rules, plan_port
from netproxy.model import Endpoint, ServicePort, ServicePortName
from netproxy.proxier import NodeConfig

pytestmark = pytest.mark.root


def _ports() -> list[tuple[ServicePort, list[Endpoint]]]:
    def name(n: str) -> ServicePortName:
        return ServicePortName("default", n, "http")

    def ep(ip: str, node: str | None = None) -> Endpoint:
        return Endpoint(ip, 8080, node_name=node)

    return [
        (ServicePort(name("a"), "10.96.0.1", 80, "TCP"),
         [ep("10.244.1.2"), ep("10.244.2.3"), ep("10.244.3.4")]),
        (ServicePort(name("u"), "10.96.0.2", 53, "UDP"), [ep("10.244.1.5")]),
        (ServicePort(name("aff"), "10.96.0.3", 80, "TCP", affinity_timeout=10800),
         [ep("10.244.1.6"), ep("10.244.1.7")]),
        (ServicePort(name("np"), "10.96.0.4", 80, "TCP", node_port=30080, external_ips=("192.0.2.9",),
                     load_balancer_ips=("198.51.100.3",), type="LoadBalancer"), [ep("10.244.1.8")]),
        (ServicePort(name("loc"), "10.96.0.5", 80, "TCP", node_port=30081, external_local=True,
                     type="NodePort"),
         [ep("10.244.1.9", "n1"), ep("10.244.2.9", "n2")]),
        (ServicePort(name("locnone"), "10.96.0.6", 80, "TCP", node_port=30082, external_local=True,
                     type="NodePort"),
         [ep("10.244.2.10", "n2")]),
        (ServicePort(name("none"), "10.96.0.7", 80, "TCP", node_port=30083, external_ips=("192.0.2.10",),
                     type="NodePort"), []),
        (ServicePort(name("sctp"), "10.96.0.8", 80, "SCTP"), [ep("10.244.1.11")]),
    ]


def _plans(node: NodeConfig, large: bool, ports=None) -> dict:
    return {sp.name: plan_port(sp, eps, node, large) for sp, eps in (ports or _ports())}


def _save(ns: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "exec", ns, "iptables-nft-save"], capture_output=True, text=True,
                         check=True)
    assert "incompatible" not in out.stderr, out.stderr
    return [ln for ln in out.stdout.splitlines() if not ln.startswith("#")]


def _expr_tokens(exprs: bytes) -> list[str]:
    """A rule's expressions as `kind:data-hex` tokens (counters as `counter`), a bare `-m tcp`/`-m udp`
    as `l4-any`: iptables-nft writes the xt compat match, we write `th dport 0-65535`, which iptables-nft
    parses back to the same match (nftrules._l4_bare; the iptables-save and `iptables -C` comparisons
    hold us to that)."""
    out: list[str] = []
    for _, e in nl.parse_list(exprs):
        a = nl.parse_attrs(e)
        kind = nl.attr_str(a[nl.EXPR_NAME])
        data = nl.parse_attrs(a.get(nl.EXPR_DATA, b""))
        if kind == "match" and nl.attr_str(data[1]) in ("tcp", "udp") and data[3] == _BARE_INFO:
            out.append("l4-any")
        elif kind == "range" and out and out[-1] == _DPORT_TOKEN and \
                [nl.parse_attrs(data[k]).get(nl.DATA_VALUE) for k in (3, 4)] == [b"\0\0", b"\xff\xff"]:
            out[-1] = "l4-any"
        else:
            out.append(kind if kind == "counter" else f"{kind}:{a.get(nl.EXPR_DATA, b'').hex()}")
    return out


_BARE_INFO = struct.pack("=HHHH", 0, 0xFFFF, 0, 0xFFFF) + bytes(8)  # xt_tcp/xt_udp: every port, no flags
_DPORT_TOKEN = "payload:" + nl.parse_attrs(nl.parse_list(nftrules._DPORT)[0][1])[nl.EXPR_DATA].hex()


def _raw(table: str, counters: bool = False) -> list[str]:
    """Every chain and rule of `table` from the kernel: attributes and expressions, hex (no handles, no
    counter values; `counter` expressions only with `counters`: ours are off by default)."""
    sock = nl.NftSocket()
    try:
        out = []
        for c in sock.dump(nl.GETCHAIN, table=table) or ():
            attrs = (f"{k}={v.hex()}" for k, v in sorted(c.items()) if k in (1, 3, 4, 5, 7))
            out.append("chain " + " ".join(attrs))
        for r in sock.dump(nl.GETRULE, table=table) or ():
            parts = [nl.attr_str(r[nl.RULE_CHAIN])]
            parts += [f"a{k}={v.hex()}" for k, v in sorted(r.items()) if k not in (1, 2, 3, 4, 6)]
            tokens = _expr_tokens(r.get(nl.RULE_EXPRESSIONS, b""))
            out.append(" ".join(parts + [t for t in tokens if counters or t != "counter"]))
        return sorted(out)
    finally:
        sock.close()


def _dump_handles(table: str, chain: str) -> list[int]:
    sock = nl.NftSocket()
    try:
        return sock.rule_handles(table, chain)
    finally:
        sock.close()


def _restore(ns: str, text: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "iptables-nft-restore", "--noflush"], input=text, text=True,
                   check=True)


def _by_chain(lines: list[str]) -> dict[str, list[str]]:
    """Rules grouped per chain, order kept within each chain (chain declarations aside)."""
    out: dict[str, list[str]] = {}
    for ln in lines:
        if ln.startswith("-A "):
            out.setdefault(ln.split()[1], []).append(ln)
    return out


@pytest.mark.parametrize("chunk", [CHUNK, 2], ids=["one-transaction", "chunked"])
@pytest.mark.parametrize("large", [False, True], ids=["comments", "large-cluster"])
@pytest.mark.parametrize("counters", [False, True], ids=["no-counters", "counters"])
@pytest.mark.parametrize("cidr,node_ips",
                         [("10.244.0.0/16", ()), ("10.240.0.0/12", ("192.168.5.5", "10.0.0.7"))],
                         ids=["byte-prefix,addrtype", "bit-prefix,node-ips"])
def test_full_sync_equals_iptables_nft_restore(res, require, large, cidr, node_ips, chunk, counters):
    """Also with the initial load split into transactions of 2 ports (several chunks, then the last one);
    with per-rule counters (as iptables-nft writes them) or without (the default)."""
    require("iptables-nft")
    node = NodeConfig(node_name="n1", cluster_cidr=cidr, node_ips=node_ips)
    plans = _plans(node, large)
    ours, theirs = res.netns(), res.netns()
    worker, ref = NetnsWorker(ours), NetnsWorker(theirs)
    proxier = IptablesNftProxier(node, chunk=chunk, counters=counters)
    try:
        result = worker.call(proxier.full_sync, plans)
        chunks = proxier.timing["chunks"]
        assert chunks == 0 if chunk == CHUNK else chunks >= 3, chunks
        # the dispatch rules' handles come from their echoed runs, not a dump, and are the kernel's
        assert proxier.handle_reads == 0
        for (table, c), by_spec in proxier.handles.items():
            mine = [h for spec in proxier._order[(table, c)] for h in by_spec[spec][:1]]
            assert mine == worker.call(_dump_handles, table, c)[:len(mine)], (table, c)
        _restore(theirs, full_restore(plans, node, missing_jumps=jump_rules(node)))
        assert _save(ours) == _save(theirs)
        for table in ("nat", "filter"):
            assert worker.call(_raw, table) == ref.call(_raw, table), table
            raw = worker.call(_raw, table, True)
            if counters:
                assert raw == ref.call(_raw, table, True), table
            else:  # our rules carry no counter; the builtin chains' foreign rules are not ours
                assert not [r for r in raw if " counter" in r], table
    finally:
        worker.close()
        ref.close()
    assert result.rules == sum(1 for ln in _save(ours) if ln.startswith("-A "))


def test_one_service_changes_and_iptables_nft_edits(res, require):
    require("iptables-nft")
    node = NodeConfig(node_name="n1", cluster_cidr="10.244.0.0/16")
    ports = _ports()
    ours = res.netns()
    worker = NetnsWorker(ours)
    proxier = IptablesNftProxier(node)
    try:
        worker.call(proxier.full_sync, _plans(node, False, ports))
        # a foreign rule and chain added by iptables-nft in our tables, before and between our changes
        subprocess.run(["ip", "netns", "exec", ours, "iptables-nft", "-t", "nat", "-I", "PREROUTING", "1",
                        "-s", "203.0.113.0/24", "-j", "RETURN"], check=True)
        steps = [
            # one endpoint replaced; a Service gone; a new one (with NodePort); a port losing its endpoints
            lambda p: p.__setitem__(0, (p[0][0], [*p[0][1][:2], Endpoint("10.244.9.9", 8080)])),
            lambda p: p.pop(1),
            lambda p: p.append((ServicePort(ServicePortName("x", "new", "http"), "10.96.1.1", 8080, "TCP",
                                            node_port=30090, type="NodePort"), [Endpoint("10.244.7.7", 80)])),
            lambda p: p.__setitem__(2, (p[2][0], [])),
        ]
        for step in steps:
            before = {sp.name for sp, _ in ports}
            step(ports)
            after = {sp.name for sp, _ in ports}
            new = _plans(node, False, ports)
            changed = (before ^ after) | {n for n in after if proxier.plans.get(n) != new.get(n)}
            worker.call(proxier.apply_partial, new, changed)
            # the same plan loaded whole by iptables-nft-restore: same rules in every chain
            # (a change inserts dispatch rules first; a full load appends them in plan order)
            ref = res.netns()
            _restore(ref, full_restore(new, node, missing_jumps=jump_rules(node)))
            got, want = _by_chain(_save(ours)), _by_chain(_save(ref))
            got["PREROUTING"] = [r for r in got["PREROUTING"] if "203.0.113.0/24" not in r]
            assert {c: sorted(r) for c, r in got.items()} == {c: sorted(r) for c, r in want.items()}
            assert "KUBE-NODEPORTS" in got["KUBE-SERVICES"][-1], "the NodePorts jump must stay last"
        # iptables-nft finds our rules by their specs (`-C`, as `-D` would): natively matched ones too
        for c, specs in new[ports[0][0].name].chains.items():
            for spec in specs:
                argv = [a.strip('"') for a in nftrules._split(spec)]
                subprocess.run(["ip", "netns", "exec", ours, "iptables-nft", "-t", "nat", "-C", c, *argv],
                               check=True)
        # iptables-nft edits one of our chains and a partial restore works on the writer's table
        subprocess.run(["ip", "netns", "exec", ours, "iptables-nft", "-t", "nat", "-A", "KUBE-MARK-MASQ",
                        "-m", "comment", "--comment", "foreign", "-j", "RETURN"], check=True)
        subprocess.run(["ip", "netns", "exec", ours, "iptables-nft", "-t", "nat", "-D", "KUBE-MARK-MASQ",
                        "-m", "comment", "--comment", "foreign", "-j", "RETURN"], check=True)
        worker.call(proxier.cleanup)
        left = "\n".join(_save(ours))
        assert "KUBE-" not in left
        assert "203.0.113.0/24" in left, "cleanup removed a rule that is not ours"
    finally:
        worker.close()


@pytest.mark.parametrize("chunk", [CHUNK, 2], ids=["one-transaction", "chunked"])
def test_drift_then_full_sync_repairs(res, require, chunk):
    """A chain flushed and a hook deleted behind our back are back after the next full sync (also
    when resyncs rewrite Services in chunks of 2 ports)."""
    require("iptables-nft")
    node = NodeConfig(node_name="n1", cluster_cidr="10.244.0.0/16")
    plans = _plans(node, False)
    ours = res.netns()
    worker = NetnsWorker(ours)
    proxier = IptablesNftProxier(node, chunk=chunk, resync_chunk=chunk)
    try:
        worker.call(proxier.full_sync, plans)
        want = _save(ours)
        for argv in (["-t", "nat", "-F", "KUBE-SERVICES"],
                     ["-t", "nat", "-D", "PREROUTING", "-m", "comment", "--comment",
                      "kubernetes service portals",
                      "-j", "KUBE-SERVICES"]):
            subprocess.run(["ip", "netns", "exec", ours, "iptables-nft", *argv], check=True)
        assert _save(ours) != want
        worker.call(proxier.full_sync, plans)
        assert _by_chain(_save(ours)) == _by_chain(want)
        assert proxier.timing["chunks"] >= (3 if chunk == 2 else 0)
        # a chain deleted behind our back: the sync that assumed it fails whole, the next one reads
        # the kernel's chains again and repairs
        svc = next(c for p in plans.values() for c in p.chains if c.startswith("KUBE-SVC-"))
        for argv in (["-F", "KUBE-SERVICES"], ["-F", svc], ["-X", svc]):
            subprocess.run(["ip", "netns", "exec", ours, "iptables-nft", "-t", "nat", *argv], check=True)
        with pytest.raises(nl.NftError):
            worker.call(proxier.full_sync, plans)
        worker.call(proxier.full_sync, plans)
        assert _by_chain(_save(ours)) == _by_chain(want)
    finally:
        worker.close()


def _extra_ports(k: int) -> list[tuple[ServicePort, list[Endpoint]]]:
    return [(ServicePort(ServicePortName("more", f"s{i}", "http"), f"10.96.2.{i + 1}", 80, "TCP"),
             [Endpoint(f"10.244.5.{i + 1}", 8080), Endpoint(f"10.244.6.{i + 1}", 8080)]) for i in range(k)]


def _with_bad(plans: dict, at: int) -> dict:
    """`plans` with a port the kernel rejects (a jump to a chain that does not exist) at position `at`."""
    bad = PortRules(chains={"KUBE-SVC-BADBADBADBADBADB": ["-j KUBE-NO-SUCH-CHAIN"]})
    items = list(plans.items())
    items.insert(at, (ServicePortName("bad", "bad", "http"), bad))
    return dict(items)


@pytest.mark.parametrize("resync_chunk", [0, 2], ids=["resync-new-chains", "resync-whole-services"])
def test_failed_chunk_leaves_no_half_state_and_next_sync_repairs(res, require, resync_chunk):
    """A chunk the kernel rejects, in an initial load and in a resync adding many ports: the hooks and
    dispatch chains still show the old ruleset (none at first), only unreferenced chains may be left,
    and the next full sync equals iptables-nft-restore of its plan (those chains refilled or deleted)."""
    require("iptables-nft")
    node = NodeConfig(node_name="n1", cluster_cidr="10.244.0.0/16")
    plans = _plans(node, False)
    ours = res.netns()
    worker = NetnsWorker(ours)
    proxier = IptablesNftProxier(node, chunk=2, resync_chunk=resync_chunk)

    def reference(p: dict) -> list[str]:
        ref = res.netns()
        _restore(ref, full_restore(p, node, missing_jumps=jump_rules(node)))
        return _save(ref)

    try:
        # initial load: the chunk holding ports 4-5 fails after two chunks committed
        with pytest.raises(nl.NftError):
            worker.call(proxier.full_sync, _with_bad(plans, 4))
        left = _by_chain(_save(ours))
        assert not any("KUBE" in r for c in ("PREROUTING", "OUTPUT", "POSTROUTING") for r in left.get(c, ()))
        assert not left.get("KUBE-SERVICES") and not left.get("KUBE-NODEPORTS")
        assert any(c.startswith("KUBE-SVC-") for c in left), "the committed chunks' chains (unreferenced)"
        # the next sync plans without the first two ports, whose chains the failed load created
        first = dict(list(plans.items())[2:])
        worker.call(proxier.full_sync, first)
        assert _save(ours) == reference(first)
        # a resync adding many ports fails in its third chunk: the old ruleset stays as it was
        before = _by_chain(_save(ours))
        grown = {**first, **_plans(node, False, _extra_ports(7))}
        with pytest.raises(nl.NftError):
            worker.call(proxier.full_sync, _with_bad(grown, len(first) + 4))
        after = _by_chain(_save(ours))
        assert {c: after.get(c) for c in before} == before
        worker.call(proxier.full_sync, grown)
        assert _save(ours) == reference(grown)
    finally:
        worker.close()
