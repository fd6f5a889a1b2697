"""The bgp pod network on a 3-node netns lab: BIRD in every node namespace, configured from the Node objects
(node-to-node mesh), pods reaching each other through the routes BIRD learned, sessions on the Node, BIRD
supervised (killed → restarted, stale routes removed by its kernel protocol) and a node leaving withdrawing
its routes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from nodeagent.lab import cluster, router
from nodeagent.nodenet import annotations as ann
from nodeagent.nodenet.bird import Files, parse_protocols
from nodeagent.nodenet.birdconf import KERNEL_METRIC
from tests.e2e.cluster.lab import Lab, http, ping, start_lab, stop_lab, web_pod

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab(tmp_path_factory, images):
    lab = start_lab(tmp_path_factory.mktemp("lab-bgp"), images, 3, "bgp",
                    server_args=["--bgp-advertise-service-cluster-ips"])
    try:
        yield lab
    finally:
        stop_lab(lab)
    assert not bird_pids(lab), "BIRD outlived the lab"


def birdc(lab: Lab, node: str, *words: str) -> str:
    files = Files(os.path.join(lab.node(node).data_dir, "bird"))
    p = lab.on_node(node, "birdc", "-s", files.socket, *words)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout


def bgp_sessions(lab: Lab, node: str) -> dict[str, str]:
    rows = parse_protocols(birdc(lab, node, "show", "protocols"))
    return {p.name: p.info for p in rows if p.proto == "BGP"}


def bird_pids(lab: Lab, under: str | None = None) -> list[int]:
    """BIRD processes whose command line names the lab's directory (or `under`)."""
    needle = (under or lab.topo.lab_dir).encode()
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                argv = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if argv and os.path.basename(argv[0]) == b"bird" and needle in b" ".join(argv):
                out.append(int(d))
    return out


def bird_pid(lab: Lab, node: str) -> int | None:
    try:
        return int(open(Files(os.path.join(lab.node(node).data_dir, "bird")).pid_file).read())
    except (OSError, ValueError):
        return None


def kernel_routes(lab: Lab, node: str) -> str:
    return lab.on_node(node, "ip", "route", "show", "proto", "bird").stdout


def pod_cidrs(lab: Lab) -> dict[str, str]:
    return {n["metadata"]["name"]: n["spec"].get("podCIDR") for n in lab.get("nodes")["items"]}


def test_mesh_established_and_pods_reach_each_other(lab):
    names = [n.name for n in lab.topo.nodes]
    addr = {n.name: n.address for n in lab.topo.nodes}

    def mesh_up():
        for me in names:
            got = bgp_sessions(lab, me)
            want = {f"Mesh_{addr[o].replace('.', '_')}" for o in names if o != me}
            if set(got) != want or not all(v.startswith("Established") for v in got.values()):
                return None
        return True
    lab.wait("an Established node-to-node mesh", mesh_up, 60)
    cidrs = pod_cidrs(lab)
    for me in names:
        routes = kernel_routes(lab, me)
        for other in names:
            if other == me:
                assert f"blackhole {cidrs[me]} " in routes, routes
            else:
                assert f"{cidrs[other]} via {addr[other]} " in routes, routes
    # the sessions, as BIRD reports them, on each Node
    for me in names:
        def published(me=me):
            a = lab.get("node", me)["metadata"].get("annotations", {}).get(ann.BGP_SESSIONS)
            s = json.loads(a) if a else []
            return s if len(s) == 2 and all(x["state"] == "Established" for x in s) else None
        sessions = lab.wait(f"{me}'s sessions on its Node", published, 30)
        assert {x["peer"] for x in sessions} == {f"node {o}" for o in names if o != me}
    # nodeagent doctor shows an instance's sessions as BIRD reports them
    doctor = [sys.executable, "-m", "nodeagent", "doctor", "--data-dir", lab.node("node1").data_dir]
    d = subprocess.run([*doctor, "-o", "json"], capture_output=True, text=True, check=True)
    bgp = json.loads(d.stdout)["bgp"]
    assert {s["name"]: s["state"] for s in bgp["sessions"]} == {
        f"Mesh_{addr[o].replace('.', '_')}": "Established" for o in ("node2", "node3")}
    text = subprocess.run(doctor, capture_output=True, text=True, check=True).stdout
    assert "bgp (BIRD at " in text and "Established" in text
    lab.apply(web_pod("a", "node1", {"app": "bgp"}))
    lab.apply(web_pod("c", "node3", {"app": "bgp"}))
    pods = {p["spec"]["nodeName"]: p for p in lab.running("app=bgp", 2)}
    a, c = pods["node1"], pods["node3"]
    for src, dst in ((a, c), (c, a)):
        r = ping(lab, src, dst["status"]["podIP"])
        assert r.returncode == 0, r.stdout + r.stderr
        assert http(lab, src, f"http://{dst['status']['podIP']}/") == "hello from busybox\n"
    # no masquerade inside the cluster
    seen = lab.on_node("node3", "conntrack", "-L", "-p", "tcp", "-d", c["status"]["podIP"]).stdout
    assert f"src={a['status']['podIP']} " in seen, seen


def test_bird_killed_is_restarted_and_stale_routes_go(lab):
    node2 = lab.node("node2")
    stale = "10.244.250.0/24"
    # a route as a BIRD that died leaves it (proto bird, its metric), which no peer announces any more
    lab.on_node("node1", "ip", "route", "add", stale, "via", node2.address, "proto", "bird", "metric",
                str(KERNEL_METRIC), check=True)
    before = bird_pid(lab, "node1")
    assert before
    os.kill(before, signal.SIGKILL)
    after = lab.wait("BIRD restarted on node1", lambda: (p := bird_pid(lab, "node1")) and p != before
                     and p in bird_pids(lab) and p, 30)
    assert after != before
    lab.wait("the stale route removed by the new BIRD's kernel protocol",
             lambda: stale not in kernel_routes(lab, "node1"), 30)
    lab.wait("node1's sessions Established again",
             lambda: len(s := bgp_sessions(lab, "node1")) == 2
             and all(v.startswith("Established") for v in s.values()), 60)
    log = open(os.path.join(lab.node("node1").data_dir, "agent.log")).read()
    assert "BIRD exited (signal 9); restarting in" in log


def test_config_reloaded_not_restarted_when_a_node_joins(lab):
    pid = bird_pid(lab, "node1")
    ghost = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ghost", "annotations": {
        ann.PUBLIC_IP: lab.topo.host_address}}}
    lab.apply(ghost)
    name = f"Mesh_{lab.topo.host_address.replace('.', '_')}"
    try:
        lab.wait("a session for the new node", lambda: name in bgp_sessions(lab, "node1"), 30)
        assert bird_pid(lab, "node1") == pid  # birdc configure, not a restart
        # the others stayed up through the reload
        assert sum(v.startswith("Established") for v in bgp_sessions(lab, "node1").values()) == 2
    finally:
        lab.kubectl("delete", "node", "ghost", "--wait=false")
    lab.wait("the session for the gone node removed", lambda: name not in bgp_sessions(lab, "node1"), 30)
    assert bird_pid(lab, "node1") == pid


def bgp_peer(name: str, ip: str, asn: int, selector: str | None = None) -> dict:
    spec: dict = {"peerIP": ip, "asNumber": asn}
    if selector is not None:
        spec["nodeSelector"] = selector
    return {"apiVersion": "nodeagent.io/v1", "kind": "BGPPeer", "metadata": {"name": name}, "spec": spec}


def test_external_router_learns_pod_cidrs_and_the_clusterip_range_with_ecmp(lab):
    r = router.start(lab.topo)
    lab.apply(bgp_peer("tor", r.address, r.asn))
    names = [n.name for n in lab.topo.nodes]
    addr = {n.name: n.address for n in lab.topo.nodes}

    def all_up():
        got = {p.name: p.info for p in parse_protocols(r.birdc("show", "protocols")) if p.proto == "BGP"}
        return set(got) == set(names) and all(v.startswith("Established") for v in got.values())
    lab.wait("the router's sessions with every node", all_up, 60)
    name = f"Global_{r.address.replace('.', '_')}"
    for n in names:
        assert bgp_sessions(lab, n)[name].startswith("Established")
    cidrs = pod_cidrs(lab)

    def routes() -> str:
        return r.exec("ip", "route", "show")
    # each pod CIDR through its owner (the others announce it one AS longer); the ClusterIP range through
    # every node at once
    for n in names:
        lab.wait(f"{n}'s pod CIDR on the router", lambda n=n: f"{cidrs[n]} via {addr[n]} " in routes(), 30)
    lab.wait("the ClusterIP range as one ECMP route", lambda: "10.96.0.0/12" in routes()
             and all(f"nexthop via {addr[n]} " in routes().split("10.96.0.0/12", 1)[1] for n in names), 30)
    # the router reaches a ClusterIP Service whose pods live on other nodes
    lab.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"selector": {"app": "bgp"}, "ports": [{"port": 80}]}})
    lab.running("app=bgp", 2)
    ip = lab.get("service", "web")["spec"]["clusterIP"]
    ok = lab.wait("the ClusterIP answering the router",
                  lambda: r.exec("curl", "-sS", "-m", "5", f"http://{ip}/") == "hello from busybox\n", 60)
    assert ok
    for _ in range(5):  # whichever node the flow hashes to and whichever pod it is sent to
        assert r.exec("curl", "-sS", "-m", "5", f"http://{ip}/") == "hello from busybox\n"
    # a LoadBalancer address (from the lab's pool) announced by every node, as MetalLB's BGP mode does
    lab.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web-lb"},
               "spec": {"type": "LoadBalancer", "selector": {"app": "bgp"}, "ports": [{"port": 80}]}})
    lb = lab.wait("the LoadBalancer address", lambda: ((lab.get("service", "web-lb").get("status") or {})
                  .get("loadBalancer") or {}).get("ingress", [{}])[0].get("ip"), 60)

    def lb_route() -> str:
        return r.exec("ip", "route", "show", "exact", f"{lb}/32")
    lab.wait(f"{lb}/32 on the router through every node",
             lambda: all(f"nexthop via {addr[n]} " in lb_route() for n in names), 30)
    # the nodes' proxies program the address on their own time: the announcement may come first
    lab.wait("the LoadBalancer address answering the router",
             lambda: r.exec("curl", "-sS", "-m", "5", f"http://{lb}/") == "hello from busybox\n", 60)
    for _ in range(5):
        assert r.exec("curl", "-sS", "-m", "5", f"http://{lb}/") == "hello from busybox\n"


def test_unreachable_peer_is_reported_and_pod_traffic_is_unaffected(lab):
    dead = f"{lab.topo.subnet_prefix}.249"  # on the lab's underlay; nothing answers there
    lab.apply(bgp_peer("nobody", dead, 64999, "kubernetes.io/hostname == 'node1'"))
    name = f"Node_{dead.replace('.', '_')}"
    try:
        def reported():
            a = lab.get("node", "node1")["metadata"].get("annotations", {}).get(ann.BGP_SESSIONS)
            s = {x["name"]: x for x in json.loads(a or "[]")}
            return s.get(name) if s.get(name, {}).get("state") in ("Active", "Connect", "Idle") else None
        entry = lab.wait("the unreachable peer reported on node1", reported, 60)
        assert entry["peer"] == "BGPPeer nobody" and entry["address"] == dead
        assert name not in bgp_sessions(lab, "node2")  # the selector picked node1 only
        # BIRD's reason for it, once its connection attempts failed
        lab.wait("BIRD's reason", lambda: "Socket:" in (reported() or {}).get("lastError", "")
                 or "error" in bgp_sessions(lab, "node1")[name].lower(), 60)
        pods = {p["spec"]["nodeName"]: p for p in lab.running("app=bgp", 2)}
        r = ping(lab, pods["node1"], pods["node3"]["status"]["podIP"])
        assert r.returncode == 0, r.stdout + r.stderr
        assert sum(v.startswith("Established") for v in bgp_sessions(lab, "node1").values()) >= 2
    finally:
        lab.kubectl("delete", "bgppeer", "nobody")
    lab.wait("the peer's session removed", lambda: name not in bgp_sessions(lab, "node1"), 30)


def test_bgppeer_outside_the_supported_syntax_is_refused(lab):
    def apply(obj: dict) -> subprocess.CompletedProcess:
        return subprocess.run(["kubectl", "apply", "-f", "-"], env=lab.env, capture_output=True, text=True,
                              input=json.dumps(obj), check=False)
    p = apply(bgp_peer("bad", "172.30.0.1", 64999, "a || b"))
    assert p.returncode != 0 and "spec.nodeSelector" in p.stderr, p.stderr
    p = apply(bgp_peer("bad", "172.30.0.1:99999", 0))
    assert p.returncode != 0 and "spec.peerIP" in p.stderr and "spec.asNumber" in p.stderr, p.stderr
    assert "bad" not in lab.kubectl("get", "bgppeers", "-o", "name")


def test_a_node_leaving_withdraws_its_routes(lab):
    cidr3 = pod_cidrs(lab)["node3"]
    assert cidr3 in kernel_routes(lab, "node1") and cidr3 in kernel_routes(lab, "node2")
    pid = lab.state["pids"]["node3"]
    start = time.monotonic()
    cluster._kill_pid(pid, 30)  # the agent stops: its BIRD closes its sessions and goes
    for n in ("node1", "node2"):
        lab.wait(f"node3's routes withdrawn on {n}", lambda n=n: cidr3 not in kernel_routes(lab, n), 30)
    took = time.monotonic() - start
    assert bird_pid(lab, "node3") is None and not bird_pids(lab, lab.node("node3").data_dir + "/")
    print(f"node3's routes withdrawn {took:.1f}s after its agent was told to stop")
