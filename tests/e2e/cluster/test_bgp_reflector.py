"""The bgp pod network with a route reflector (`--bgp-route-reflectors node1`) on a 3-node lab: the other
nodes peer with node1 only, node1 reflects their pod CIDRs with the owner kept as next hop, so pods on
node2 and node3 reach each other directly; an agent killed with SIGKILL leaves its BIRD running, and the next
agent adopts it (no restart, routes kept)."""

from __future__ import annotations

import os
import signal

import pytest

from nodeagent.lab import cluster
from tests.e2e.cluster.lab import http, ping, start_lab, stop_lab, web_pod
from tests.e2e.cluster.test_bgp import bgp_sessions, bird_pid, kernel_routes, pod_cidrs

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab(tmp_path_factory, images):
    lab = start_lab(tmp_path_factory.mktemp("lab-bgp-rr"), images, 3, "bgp",
                    server_args=["--bgp-route-reflectors", "node1", "--bgp-as", "65010"])
    try:
        yield lab
    finally:
        stop_lab(lab)


def test_clients_peer_with_the_reflector_only_and_routes_keep_the_owner_as_next_hop(lab):
    addr = {n.name: n.address for n in lab.topo.nodes}
    mesh = {n: f"Mesh_{a.replace('.', '_')}" for n, a in addr.items()}

    def up():
        want = {"node1": {mesh["node2"], mesh["node3"]}, "node2": {mesh["node1"]}, "node3": {mesh["node1"]}}
        for n, names in want.items():
            got = bgp_sessions(lab, n)
            if set(got) != names or not all(v.startswith("Established") for v in got.values()):
                return None
        return True
    lab.wait("the route reflector topology Established", up, 60)
    conf = open(os.path.join(lab.node("node1").data_dir, "bird", "bird.conf")).read()
    assert conf.count("rr client;") == 2 and "define CLUSTER_AS = 65010;" in conf
    cidrs = pod_cidrs(lab)
    # node3's pod CIDR on node2 came through node1, with node3 still the next hop
    lab.wait("node3's pod CIDR reflected to node2",
             lambda: f"{cidrs['node3']} via {addr['node3']} " in kernel_routes(lab, "node2"), 30)
    assert f"{cidrs['node2']} via {addr['node2']} " in kernel_routes(lab, "node3")
    lab.apply(web_pod("b", "node2", {"app": "rr"}))
    lab.apply(web_pod("c", "node3", {"app": "rr"}))
    pods = {p["spec"]["nodeName"]: p for p in lab.running("app=rr", 2)}
    r = ping(lab, pods["node2"], pods["node3"]["status"]["podIP"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert http(lab, pods["node3"], f"http://{pods['node2']['status']['podIP']}/") == "hello from busybox\n"


def test_a_killed_agent_leaves_bird_running_and_the_next_one_adopts_it(lab):
    node = lab.node("node2")
    before = bird_pid(lab, "node2")
    assert before
    agent = lab.state["pids"]["node2"]
    os.kill(agent, signal.SIGKILL)
    lab.wait("the agent gone", lambda: not cluster._alive(agent), 30)
    # BIRD kept node2's routes and sessions while no agent ran
    assert bird_pid(lab, "node2") == before and cluster._alive(before)
    cidr3 = pod_cidrs(lab)["node3"]
    assert cidr3 in kernel_routes(lab, "node2")
    # a new agent for the same data dir adopts it
    proc = cluster.start_agent(lab.topo, node)
    lab.state["pids"]["node2"] = proc.pid
    log = os.path.join(node.data_dir, "agent.log")
    lab.wait("the new agent adopting BIRD",
             lambda: f"adopted the running BIRD (pid {before})" in open(log).read(), 60)
    assert bird_pid(lab, "node2") == before
    lab.wait("node2's session Established", lambda: all(
        v.startswith("Established") for v in bgp_sessions(lab, "node2").values()), 30)

