"""A 3-node netns lab (vxlan): Services across nodes, NodePort everywhere, DaemonSets, cordon/drain with
kubectl, and a node whose agent dies: NotReady, its pods evicted after their tolerationSeconds and
replaced on the other nodes. The node-failure test runs last: it leaves node3 dead."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.e2e.cluster.lab import HTTPD, http, start_lab, stop_lab

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

NODES = ("node1", "node2", "node3")
# serves its own pod name, so a client can tell which endpoint answered
WHOAMI = ["sh", "-c",
          "mkdir -p /tmp/www && hostname > /tmp/www/index.html && exec httpd -f -p 80 -h /tmp/www"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory, images):
    lab = start_lab(tmp_path_factory.mktemp("lab3"), images, 3, "vxlan", node_monitor_grace_period=8.0)
    try:
        yield lab
    finally:
        stop_lab(lab)


def container(command=None):
    c = {"name": "web", "image": HTTPD, "imagePullPolicy": "Never"}
    if command:
        c["command"] = command
    return c


def deployment(name, replicas, tolerations=None):
    spec = {"terminationGracePeriodSeconds": 1, "containers": [container(WHOAMI)]}
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def test_clusterip_and_nodeport_reach_pods_on_every_node_from_every_node(lab):
    for n in NODES:
        lab.apply({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"web-{n}", "labels": {"app": "web"}},
                   "spec": {"nodeName": n, "terminationGracePeriodSeconds": 1,
                            "containers": [container(WHOAMI)]}})
    lab.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
               "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80}]}})
    pods = lab.running("app=web", 3)
    names = {p["metadata"]["name"] for p in pods}
    assert {p["spec"]["nodeName"] for p in pods} == set(NODES)
    svc = lab.get("service", "web")
    cip, nport = svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["nodePort"]
    for n in NODES:
        def spread(n=n):
            seen = {http(lab, n, f"http://{cip}/").strip() for _ in range(24)}
            return seen if seen == names else None
        lab.wait(f"the ClusterIP answered by pods on every node, from {n}", spread, 60, interval=1)
    # from each backend too, itself included (hairpin): the node's masquerade exemption for pod-to-pod traffic
    # must not come before the proxy's masquerade of hairpin connections
    for pod in pods:
        seen: set[str] = set()

        def spread_from_pod(pod=pod, seen=seen):
            seen.update(http(lab, pod, f"http://{cip}/").strip() for _ in range(6))
            assert seen >= names, f"answers so far: {sorted(seen)}"
            return True
        lab.wait(f"the ClusterIP answered by every pod, itself too, from pod {pod['metadata']['name']}",
                 spread_from_pod, 90, interval=0.5)
    for client in NODES:
        for target in lab.topo.nodes:

            def answered(c=client, t=target):
                return http(lab, c, f"http://{t.address}:{nport}/").strip() in names
            got = lab.wait(f"NodePort {target.address}:{nport} from {client}", answered, 30)
            assert got
    lab.kubectl("delete", "service", "web")
    lab.kubectl("delete", "pods", "-l", "app=web", "--wait=false")


def test_daemonset_lands_on_every_node(lab):
    lab.apply({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agentd"},
               "spec": {"selector": {"matchLabels": {"app": "agentd"}},
                        "template": {"metadata": {"labels": {"app": "agentd"}},
                                     "spec": {"terminationGracePeriodSeconds": 1,
                                              "containers": [container()]}}}})
    pods = lab.running("app=agentd", 3)
    assert sorted(p["spec"]["nodeName"] for p in pods) == list(NODES)


def test_cordon_and_drain_move_pods_away(lab):
    lab.apply(deployment("mover", 4))
    lab.running("app=mover", 4)
    lab.kubectl("drain", "node2", "--ignore-daemonsets", "--force", "--delete-emptydir-data",
                "--grace-period=1",
                "--timeout=120s", timeout=180)
    try:
        assert lab.get("node", "node2")["spec"].get("unschedulable") is True
        pods = lab.running("app=mover", 4)
        assert all(p["spec"]["nodeName"] != "node2" for p in pods)
        # a DaemonSet's pod stays (drain ignores it); everything else left node2
        left = [p for p in lab.get("pods")["items"] if p["spec"].get("nodeName") == "node2"
                and not p["metadata"].get("deletionTimestamp")]
        assert {p["metadata"]["labels"].get("app") for p in left} <= {"agentd"}
    finally:
        lab.kubectl("uncordon", "node2")
    lab.kubectl("delete", "deployment", "mover")


def test_a_node_whose_agent_stops_goes_notready_and_its_pods_move(lab):
    tolerate = [{"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}
                for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")]
    # land every replica on node3: the other nodes are cordoned while they are placed
    for n in ("node1", "node2"):
        lab.kubectl("cordon", n)
    try:
        lab.apply(deployment("survivor", 2, tolerate))
        before = lab.running("app=survivor", 2)
    finally:
        for n in ("node1", "node2"):
            lab.kubectl("uncordon", n)
    assert {p["spec"]["nodeName"] for p in before} == {"node3"}

    os.kill(lab.state["pids"]["node3"], signal.SIGKILL)

    def not_ready():
        conds = {c["type"]: c["status"] for c in lab.get("node", "node3")["status"]["conditions"]}
        return conds.get("Ready") != "True"
    try:
        lab.wait("node3 NotReady", not_ready, 90)
        after = lab.running("app=survivor", 2, timeout=120,
                            where=lambda p: p["spec"].get("nodeName") not in (None, "node3"))
    except AssertionError as e:
        raise AssertionError(f"{e}\n{_survivor_state(lab)}") from None
    assert all(p["spec"]["nodeName"] in ("node1", "node2") for p in after)
    assert len(lab.pods("app=survivor")) >= 2
    old = {p["metadata"]["uid"] for p in before}
    assert not old & {p["metadata"]["uid"] for p in after}
    # the old pods were evicted: marked for deletion (their kubelet is gone, so they stay Terminating) or gone
    for p in lab.pods("app=survivor"):
        if p["metadata"]["uid"] in old:
            assert p["metadata"].get("deletionTimestamp"), p["metadata"]["name"]
    taints = {t["key"] for t in lab.get("node", "node3")["spec"].get("taints") or []}
    assert "node.kubernetes.io/unreachable" in taints


def _survivor_state(lab) -> str:
    """What a failure of the node-failure test needs to say: each survivor pod's node, phase, conditions
    and events, node3's taints and conditions (and every node's Ready), the ReplicaSet's counts and the
    server's lines about them."""
    out = []
    for p in lab.pods("app=survivor"):
        m, st = p["metadata"], p.get("status") or {}
        out.append(f"pod {m['name']} node={p['spec'].get('nodeName')} phase={st.get('phase')} "
                   f"deleted={m.get('deletionTimestamp')} ip={st.get('podIP')}")
        out += [f"  condition {c.get('type')}={c.get('status')} {c.get('reason', '')} {c.get('message', '')}"
                for c in st.get("conditions") or []]
        out += [f"  container {c.get('name')} ready={c.get('ready')} state={c.get('state')}"
                for c in st.get("containerStatuses") or []]
        events = lab.get("events", "--field-selector", f"involvedObject.uid={m['uid']}")["items"]
        out += [f"  event {ev.get('type')} {ev.get('reason')} {ev.get('source', {}).get('component', '')}: "
                f"{ev.get('message')}" for ev in events]
    for node in lab.get("nodes")["items"]:  # node3's, and whether a live node was ever taken for dead
        name = node["metadata"]["name"]
        out.append(f"{name} taints {node['spec'].get('taints')}")
        out += [f"{name} condition {c.get('type')}={c.get('status')} {c.get('reason', '')} "
                f"{c.get('lastTransitionTime', '')}" for c in node["status"].get("conditions") or []
                if name == "node3" or c.get("type") == "Ready"]
    for rs in lab.get("replicasets", "-l", "app=survivor")["items"]:
        out.append(f"replicaset {rs['metadata']['name']} status {rs.get('status')}")
    log = Path(lab.topo.server_dir, "server.log")
    if log.exists():
        lines = [line for line in log.read_text(errors="replace").splitlines()
                 if "survivor" in line or "node3" in line or "Ready is now" in line]
        out += ["server log:", *lines[-60:]]
    return "\n".join(out)
