"""The same behaviour suite for every proxy mode, with real traffic between network namespaces.

Each test builds a node netns (bridge + pod netns behind it) and a client netns
routed through the node; the proxier runs inside the node netns, so nothing is
written to the host's own namespace.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter

import pytest

from kernel.netns import NetnsWorker
from netproxy import conntrack
from netproxy.backends import make_proxier
from netproxy.proxier import NodeConfig
from netproxy.proxy import Proxy
from nodeagent.testing.netproxy_lab import Lab, endpoint_slice, service, sh
from tests.harness.resources import JANITOR

pytestmark = [pytest.mark.root]

NODE = "node-a"
VIP = "10.96.0.10"
HTTP = [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]
EP_HTTP = [{"name": "http", "port": 8080, "protocol": "TCP"}]


@pytest.fixture(params=["iptables", "iptables-legacy", "iptables-xtblob", "iptables-restore", "iptables-nft",
                        "nftables", "ipvs"])
def mode(request, require):
    if request.param == "nftables":
        require("nftables")
    if request.param in ("iptables", "iptables-nft"):  # iptables: iptables-nft rules over netlink by default
        require("iptables-nft")
    if request.param == "ipvs":
        require("ipvs", "dummy")
    return request.param


@pytest.fixture
def lab():
    lab = Lab()
    key = f"netproxy lab {lab.tag}"
    JANITOR.register(key, lab.close)  # also removed at session end if the run is interrupted
    try:
        yield lab
    finally:
        JANITOR.release(key)
        assert lab.gone(), "test namespaces left behind"


class Harness:
    """A proxy over one lab node, fed with in-memory Service / EndpointSlice dicts."""

    def __init__(self, lab: Lab, mode: str, options: dict[str, str] | None = None, **proxy_kw) -> None:
        self.lab = lab
        self.node = NodeConfig(node_name=NODE, cluster_cidr=lab.cluster_cidr,
                               node_ips=(lab.node_ip,) if lab.node_ip else ())
        self.worker = NetnsWorker(lab.node)
        variant = {"iptables": {"backend": "nft"}, "iptables-legacy": {"backend": "legacy"},
                   "iptables-restore": {"incremental": "restore"},
                   "iptables-xtblob": {"incremental": "xtblob"},
                   "iptables-nft": {"backend": "nft-restore"}}.get(mode, {})
        options = {**variant, **(options or {})}
        self.proxy = Proxy(make_proxier(mode.split("-")[0], self.node, **options), self.worker, **proxy_kw)
        self.proxy.set_services_synced()
        self.proxy.set_endpoints_synced()
        self.slices: dict[str, dict] = {}

    def service(self, name: str, **kw) -> dict:
        svc = service(name, kw.pop("cluster_ip", VIP), kw.pop("ports", HTTP), **kw)
        self.proxy.on_service(None, svc)
        return svc

    def endpoints(self, name: str, pods: list[str], ports=EP_HTTP, **kw) -> None:
        eps = [{"ip": self.lab.pods[p], "node": kw.get("nodes", {}).get(p, NODE)} for p in pods]
        s = endpoint_slice(name, ports, eps)
        self.slices[name] = s
        self.proxy.on_endpoint_slice(s)

    def sync(self, full: bool = False):
        return asyncio.run(self.proxy.sync(full=full))

    def close(self) -> None:
        try:
            asyncio.run(self.proxy.cleanup())
        finally:
            self.worker.close()


@pytest.fixture
def make(lab):
    made = []

    def _make(mode: str, **kw) -> Harness:
        h = Harness(lab, mode, **kw)
        made.append(h)
        return h

    yield _make
    for h in made:
        h.close()


def _names(answers: list[str]) -> Counter:
    return Counter(a.split()[0] for a in answers)


def test_cluster_ip_spreads_over_every_endpoint(lab, make, mode):
    pods = [lab.add_pod(n) and n for n in ("a", "b", "c")]
    client = lab.clients.get("client") or (lab.add_client() and lab.clients["client"])
    h = make(mode)
    h.service("web")
    h.endpoints("web", pods)
    h.sync()
    answers = lab.answers(client, "tcp", VIP, 80, 1000)
    counts = _names(answers)
    assert set(counts) == {"a", "b", "c"}, counts
    # chi-square, 2 degrees of freedom: 27.6 is p = 1e-6 for a fair 1/3 split
    chi2 = sum((counts[p] - 1000 / 3) ** 2 / (1000 / 3) for p in pods)
    assert chi2 < 27.6, counts
    # off-cluster client → masqueraded: pods see the node's address
    assert {a.split()[1] for a in answers} == {lab.node_pod_ip}


def test_endpoint_removal_stops_traffic(lab, make, mode):
    for n in ("a", "b"):
        lab.add_pod(n)
    lab.add_client()
    client = lab.clients["client"]
    h = make(mode)
    h.service("web")
    h.endpoints("web", ["a", "b"])
    h.sync()
    assert set(_names(lab.answers(client, "tcp", VIP, 80, 60))) == {"a", "b"}
    h.endpoints("web", ["b"])
    h.sync()
    assert set(_names(lab.answers(client, "tcp", VIP, 80, 60))) == {"b"}


def test_udp_endpoint_removal_clears_conntrack(lab, make, mode):
    udp = [{"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"}]
    ep_udp = [{"name": "dns", "port": 5353, "protocol": "UDP"}]
    lab.add_pod("a", tcp=(), udp=(5353,))
    lab.add_pod("b", tcp=(), udp=(5353,))
    lab.add_client()
    client = lab.clients["client"]
    h = make(mode)
    h.service("dns", ports=udp)
    h.endpoints("dns", ["a"], ports=ep_udp)
    h.sync()
    assert lab.answers(client, "udp", VIP, 53, 3, src_port=40000)[0].startswith("a ")
    flows = lab.in_node("conntrack", "-L", "-p", "udp", "--orig-dst", VIP, check=False)
    assert lab.pods["a"] in flows
    # a replaced by b; a's server keeps answering, so only the conntrack cleanup can move the flow
    h.endpoints("dns", ["b"], ports=ep_udp)
    h.sync()
    assert lab.pods["a"] not in lab.in_node("conntrack", "-L", "-p", "udp", "--orig-dst", VIP, check=False)
    assert lab.answers(client, "udp", VIP, 53, 3, src_port=40000) == [f"b {lab.node_pod_ip}"] * 3
    if mode != "ipvs":
        assert h.proxy.stats.conntrack_deleted >= 1
    # ipvs: with expire_nodest_conn=1 a 5.9+ kernel expires the removed real server's IPVS connections,
    # and their conntrack entries with them, right when the server is deleted, before the proxy's own
    # cleanup runs (which then finds nothing); test_conntrack_cleanup_matches_ipvs_flows shows that the
    # cleanup does match IPVS flows, for older kernels where only the next packet expires them.


def test_conntrack_cleanup_matches_ipvs_flows(lab, make, require):
    """The UDP cleanup's conntrack filter (original VIP:port, DNAT to the endpoint) finds the flows IPVS
    made: with vs/conntrack=1 IPVS rewrites the reply tuple as a DNAT would."""
    require("ipvs", "dummy")
    udp = [{"name": "dns", "port": 53, "targetPort": 5353, "protocol": "UDP"}]
    ep_udp = [{"name": "dns", "port": 5353, "protocol": "UDP"}]
    lab.add_pod("a", tcp=(), udp=(5353,))
    lab.add_client()
    h = make("ipvs")
    h.service("dns", ports=udp)
    h.endpoints("dns", ["a"], ports=ep_udp)
    h.sync()
    answers = lab.answers(lab.clients["client"], "udp", VIP, 53, 2, src_port=40001)
    assert answers == [f"a {lab.node_pod_ip}"] * 2
    assert lab.pods["a"] in lab.in_node("conntrack", "-L", "-p", "udp", "--orig-dst", VIP, check=False)
    ((spn, sp),) = h.proxy.state.services.items()
    stale = [(sp, ep) for ep in h.proxy.state.endpoints[spn]]
    assert h.worker.call(conntrack.clear_stale, stale, []) == 1
    assert lab.pods["a"] not in lab.in_node("conntrack", "-L", "-p", "udp", "--orig-dst", VIP, check=False)


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict-arp"])
def test_ipvs_strict_arp_stops_the_node_claiming_service_ips(lab, make, require, strict):
    """kube-proxy's --ipvs-strict-arp: the Service IPs on kube-ipvs0 are answered on ARP only with it off
    (Linux answers for any local address on any interface), which is what L2 load balancers trip on."""
    require("ipvs", "dummy")
    lab.add_pod("a")
    lab.add_client()
    h = make("ipvs", options={"strict_arp": "true" if strict else "false"})
    h.service("web")
    h.endpoints("web", ["a"])
    h.sync(full=True)
    values = [lab.in_node("cat", f"/proc/sys/net/ipv4/conf/all/{k}").strip()
              for k in ("arp_ignore", "arp_announce")]
    assert values == (["1", "2"] if strict else ["0", "0"])
    # asked on the client's link for a VIP that only kube-ipvs0 holds: the node answers iff not strict
    arping = sh("ip", "netns", "exec", lab.clients["client"], "busybox", "arping", "-f", "-c", "2", "-w", "2",
                "-I", "eth0", VIP, check=False)
    assert ("reply from " + VIP in arping) is not strict, arping
    assert _names(lab.answers(lab.clients["client"], "tcp", VIP, 80, 2)) == {"a": 2}  # Services still work


def test_nodeport_from_another_node(lab, make, mode):
    lab.add_pod("a")
    lab.add_client("other-node")
    h = make(mode)
    h.service("web", type="NodePort", ports=[{**HTTP[0], "nodePort": 30080}])
    h.endpoints("web", ["a"])
    h.sync()
    node_ip = lab.gateway_of("other-node")
    assert _names(lab.answers(lab.clients["other-node"], "tcp", node_ip, 30080, 5)) == {"a": 5}
    # the ClusterIP still works beside it
    assert _names(lab.answers(lab.clients["other-node"], "tcp", VIP, 80, 2)) == {"a": 2}


def test_external_ip_and_load_balancer_ip(lab, make, mode):
    lab.add_pod("a")
    lab.add_client()
    lab.ip_batch(lab.clients["client"], ["route add 10.97.0.0/16 via " + lab.gateway_of()])
    lab.ip_batch(lab.node, ["route add 10.97.0.0/16 dev " + lab.bridge])
    h = make(mode)
    svc = service("lb", VIP, HTTP, type="LoadBalancer", externalIPs=["10.97.0.5"])
    svc["spec"]["ports"][0]["nodePort"] = 30081
    svc["status"] = {"loadBalancer": {"ingress": [{"ip": "10.97.0.6"}]}}
    h.proxy.on_service(None, svc)
    h.endpoints("lb", ["a"])
    h.sync()
    for ip in ("10.97.0.5", "10.97.0.6"):
        assert _names(lab.answers(lab.clients["client"], "tcp", ip, 80, 2)) == {"a": 2}, ip


def test_session_affinity_sticks(lab, make, mode):
    for n in ("a", "b", "c"):
        lab.add_pod(n)
    lab.add_client()
    h = make(mode)
    h.service("sticky", sessionAffinity="ClientIP",
              sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}})
    h.endpoints("sticky", ["a", "b", "c"])
    h.sync()
    counts = _names(lab.answers(lab.clients["client"], "tcp", VIP, 80, 60))
    assert len(counts) == 1 and sum(counts.values()) == 60, counts


def test_local_policy_preserves_client_ip_and_uses_local_endpoints(lab, make, mode):
    lab.add_pod("local")
    lab.add_pod("remote")  # reachable, but listed as running on another node
    cip = lab.add_client("outside")
    h = make(mode)
    h.service("loc", type="NodePort", externalTrafficPolicy="Local", ports=[{**HTTP[0], "nodePort": 30082}])
    h.endpoints("loc", ["local", "remote"], nodes={"remote": "node-b"})
    h.sync()
    answers = lab.answers(lab.clients["outside"], "tcp", lab.gateway_of("outside"), 30082, 40)
    assert answers == [f"local {cip}"] * 40
    # the ClusterIP (Cluster internal policy) still uses both
    assert set(_names(lab.answers(lab.clients["outside"], "tcp", VIP, 80, 60))) == {"local", "remote"}


def test_internal_traffic_policy_local(lab, make, mode):
    lab.add_pod("local")
    lab.add_pod("remote")
    lab.add_client()
    h = make(mode)
    h.service("itp", internalTrafficPolicy="Local")
    h.endpoints("itp", ["local", "remote"], nodes={"remote": "node-b"})
    h.sync()
    assert _names(lab.answers(lab.clients["client"], "tcp", VIP, 80, 30)) == {"local": 30}


def test_hairpin_pod_reaches_itself_through_its_service(lab, make, mode):
    lab.add_pod("a")
    h = make(mode)
    h.service("self")
    h.endpoints("self", ["a"])
    h.sync()
    answers = lab.answers(lab.pod_netns("a"), "tcp", VIP, 80, 5)
    # masqueraded to the node's bridge address, so the reply comes back through the node
    assert answers == [f"a {lab.node_pod_ip}"] * 5


def test_service_changing_shape_keeps_working(lab, make, mode):
    """ClusterIP → NodePort with affinity → ClusterIP again, by partial syncs (nftables moves the port
    between its element-only layout and per-Service chains)."""
    for n in ("a", "b"):
        lab.add_pod(n)
    lab.add_client("other-node")
    client, node_ip = lab.clients["other-node"], lab.gateway_of("other-node")
    h = make(mode)
    plain = h.service("web")
    h.endpoints("web", ["a", "b"])
    h.sync()
    assert set(_names(lab.answers(client, "tcp", VIP, 80, 40))) == {"a", "b"}
    shaped = service("web", VIP, [{**HTTP[0], "nodePort": 30083}], type="NodePort",
                     sessionAffinity="ClientIP",
                     sessionAffinityConfig={"clientIP": {"timeoutSeconds": 60}})
    h.proxy.on_service(plain, shaped)
    h.sync()
    assert len(_names(lab.answers(client, "tcp", VIP, 80, 20))) == 1  # sticky now
    assert sum(_names(lab.answers(client, "tcp", node_ip, 30083, 5)).values()) == 5
    h.proxy.on_service(shaped, plain)
    h.endpoints("web", ["b"])
    h.sync()
    assert _names(lab.answers(client, "tcp", VIP, 80, 10)) == {"b": 10}
    assert lab.connect(client, "tcp", node_ip, 30083, 1, timeout=1.0)[0][0] in ("refused", "timeout")
    if mode == "nftables":
        text = lab.in_node("nft", "list", "table", "ip", "kube-proxy")
        assert "default/web" not in text and "affinity-" not in text  # its chains and sets are gone
        assert f"{VIP} . tcp . 80 . 0 : {lab.pods['b']} . 8080" in text


def test_service_without_endpoints_is_rejected_immediately(lab, make, mode):
    lab.add_pod("a")
    lab.add_client()
    h = make(mode)
    h.service("empty")
    h.sync()
    result = lab.connect(lab.clients["client"], "tcp", VIP, 80, 3, timeout=5.0)
    assert [a for a, _ in result] == ["refused"] * 3
    assert all(t < 1.0 for _, t in result)  # a reject, not a 5 s black hole
    h.endpoints("empty", ["a"])
    h.sync()
    assert _names(lab.answers(lab.clients["client"], "tcp", VIP, 80, 2)) == {"a": 2}


def test_drift_is_repaired_by_the_periodic_resync(lab, make, mode):
    lab.add_pod("a")
    lab.add_client()
    h = make(mode, max_interval=0.5, min_interval=0.0)
    h.service("web")
    h.endpoints("web", ["a"])
    client = lab.clients["client"]

    async def scenario():
        ready = asyncio.Event()
        task = asyncio.create_task(h.proxy.run(ready))
        try:
            await asyncio.wait_for(h.proxy.synced.wait(), 10)
            ok = await asyncio.to_thread(lab.answers, client, "tcp", VIP, 80, 1)
            assert ok == [f"a {lab.node_pod_ip}"]
            await asyncio.to_thread(_break_rules, lab, mode)
            broken = await asyncio.to_thread(lab.answers, client, "tcp", VIP, 80, 1, timeout=0.5)
            assert broken != ok, "the drift did not break the Service (test would prove nothing)"
            full_before = h.proxy.stats.full_syncs
            for _ in range(40):
                await asyncio.sleep(0.25)
                if h.proxy.stats.full_syncs > full_before:
                    break
            assert h.proxy.stats.full_syncs > full_before
            return await asyncio.to_thread(lab.answers, client, "tcp", VIP, 80, 1)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    assert asyncio.run(scenario()) == [f"a {lab.node_pod_ip}"]


def _iptables(mode: str) -> str:
    if mode == "ipvs":  # its fixed rules go to the node's one iptables backend
        from kernel.iptables import backend as node_iptables_backend

        return f"iptables-{node_iptables_backend()}"
    return "iptables-nft" if mode in ("iptables", "iptables-nft") else "iptables-legacy"


@pytest.fixture(params=["iptables", "iptables-legacy", "iptables-nft", "ipvs"])
def jump_mode(request, require):
    """The modes that hook nat POSTROUTING with an iptables jump (nftables mode has its own srcnat chain)."""
    require(*{"iptables": ("iptables-nft",), "iptables-nft": ("iptables-nft",), "ipvs": ("ipvs", "dummy")}
            .get(request.param, ()))
    return request.param


def test_nodenet_finds_the_postrouting_jump(lab, make, jump_mode):
    """nodenet keeps its cluster masquerade exemption after the proxy's nat POSTROUTING jump, which it
    finds by kube-proxy's comment: a jump without it would end up after the exemption, breaking hairpin."""
    from nodeagent.nodenet.masq import PROXY_JUMP_COMMENT

    mode = jump_mode
    lab.add_pod("a")
    h = make(mode)
    h.service("web")
    h.endpoints("web", ["a"])
    h.sync(full=True)
    rules = lab.in_node(_iptables(mode), "-w", "-t", "nat", "-S", "POSTROUTING").splitlines()
    jumps = [r for r in rules if r.endswith("-j KUBE-POSTROUTING")]
    assert len(jumps) == 1 and PROXY_JUMP_COMMENT in jumps[0], rules


def _break_rules(lab: Lab, mode: str) -> None:
    if mode.startswith("iptables"):
        lab.in_node(_iptables(mode), "-w", "-t", "nat", "-F", "KUBE-SERVICES")
    elif mode == "nftables":
        # a one-endpoint ClusterIP port lives in the picked set for one endpoint (no chain of its own)
        lab.in_node("nft", "delete", "element", "ip", "kube-proxy", "service-ips-1-endpoint",
                    f"{{ {VIP} . tcp . 80 }}")
    else:
        lab.in_node("ipvsadm", "-D", "-t", f"{VIP}:80")
    lab.in_node("conntrack", "-F", check=False)


def test_cleanup_removes_everything(lab, make, mode):
    lab.add_pod("a")
    h = make(mode)
    h.service("web")
    h.endpoints("web", ["a"])
    h.sync()
    asyncio.run(h.proxy.cleanup())
    if mode.startswith("iptables"):
        for table in ("nat", "filter"):
            assert "KUBE-" not in lab.in_node(f"{_iptables(mode)}-save", "-t", table)
    elif mode == "nftables":
        assert "kube-proxy" not in lab.in_node("nft", "list", "tables")
    else:
        assert VIP not in lab.in_node("ipvsadm", "-Ln")
        assert "KUBE-" not in lab.in_node(_iptables(mode), "-w", "-t", "nat", "-S")


@pytest.fixture(autouse=True)
def _root_only():
    if os.geteuid() != 0:
        pytest.skip("needs root")
