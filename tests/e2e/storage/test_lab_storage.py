"""Storage across nodes in a 2-node netns lab (issue 22 items 2, 3, 7): a WaitForFirstConsumer claim gets its
volume on the node the scheduler picked for its pod (node2, by the pod's affinity), in that node's data dir;
a StatefulSet's ordinals keep their data when a pod is deleted and re-created and across scale 3 → 1 → 3
(each pod comes back to the node its volume lives on); whenScaled: Delete removes a condemned ordinal's
claim, volume and directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster.lab import HTTPD, Lab, start_lab, stop_lab

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

# an ordinal's token: written once, on its first start, into its claim
KEEP_TOKEN = ["sh", "-c",
              '[ -s /data/token ] || echo "$HOSTNAME $RANDOM$RANDOM" > /data/token; exec sleep 3600']


@pytest.fixture(scope="module")
def lab(tmp_path_factory, images):
    lab = start_lab(tmp_path_factory.mktemp("labpv"), images, 2, "host-gw")
    try:
        yield lab
    finally:
        lab.kubectl("delete", "statefulsets,pods", "--all", "--wait=true", "--timeout=90s", check=False)
        lab.kubectl("delete", "pvc", "--all", "--wait=true", "--timeout=90s", check=False)
        stop_lab(lab)


def running(lab: Lab, selector: str, n: int) -> list[dict[str, Any]]:
    """lab.running, with what the cluster says (claims, volumes, pods, events, logs) when it times out."""
    try:
        return lab.running(selector, n)
    except AssertionError as e:
        state = lab.kubectl("get", "pvc,pv,pods", "-o", "wide", check=False) + \
            lab.kubectl("get", "events", check=False)
        logs = "".join(f"--- {p} ---\n" + Path(p).read_text(errors="replace")[-2500:]
                       for p in [Path(lab.topo.server_dir, "server.log")]
                       + [Path(n.data_dir, "agent.log") for n in lab.topo.nodes])
        raise AssertionError(f"{e}\n{state}\n{logs}") from None


def claim_path(lab: Lab, claim: str) -> tuple[Path, dict[str, Any]]:
    pvc = lab.get("pvc", claim)
    pv = lab.get("pv", pvc["spec"]["volumeName"])
    return Path(pv["spec"]["hostPath"]["path"]), pv


def test_wait_for_first_consumer_puts_the_volume_on_the_pods_node(lab):
    node2 = lab.node("node2")
    lab.apply({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "on-node2"},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "32Mi"}}}})
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node2"]}]}]}}}
    lab.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pinned", "labels": {"app": "pinned"}},
               "spec": {"affinity": affinity, "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "c", "image": HTTPD, "imagePullPolicy": "Never",
                                        "command": ["sh", "-c", "echo on-node2 > /data/f; exec sleep 3600"],
                                        "volumeMounts": [{"name": "d", "mountPath": "/data"}]}],
                        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "on-node2"}}]}})
    pod = running(lab, "app=pinned", 1)[0]
    assert pod["spec"]["nodeName"] == "node2"
    path, pv = claim_path(lab, "on-node2")
    assert path.parent == Path(node2.data_dir, "storage")
    expr = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert expr["values"] == ["node2"]
    lab.wait("the pod's file in node2's volume dir",
             lambda: (path / "f").exists() and (path / "f").read_text())
    assert (path / "f").read_text() == "on-node2\n"
    lab.kubectl("delete", "pod", "pinned", "--wait=true", "--timeout=60s")
    lab.kubectl("delete", "pvc", "on-node2", "--wait=true", "--timeout=60s")
    lab.wait("the volume dir removed on node2", lambda: not path.exists())


def statefulset(name: str, replicas: int, when_scaled: str = "Retain") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name},
            "spec": {"replicas": replicas, "serviceName": name, "podManagementPolicy": "Parallel",
                     "selector": {"matchLabels": {"app": name}},
                     "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain",
                                                              "whenScaled": when_scaled},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "c", "image": HTTPD, "imagePullPolicy": "Never",
                                         "command": KEEP_TOKEN,
                                         "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]}},
                     "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                         "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}}}]}}


def tokens(lab: Lab, name: str, n: int) -> dict[str, tuple[str, str]]:
    """ordinal pod → (its node, the token in its claim)."""
    pods = {p["metadata"]["name"]: p for p in running(lab, f"app={name}", n)}
    out = {}
    for pod_name, p in pods.items():
        path, _ = claim_path(lab, f"data-{pod_name}")
        token = lab.wait(f"{pod_name}'s token", lambda path=path: (path / "token").exists()
                         and (path / "token").read_text())
        out[pod_name] = (p["spec"]["nodeName"], token)
    return out


def test_statefulset_ordinals_keep_their_data(lab):
    lab.apply(statefulset("keep", 3))
    first = tokens(lab, "keep", 3)
    assert sorted(first) == ["keep-0", "keep-1", "keep-2"]
    for pod_name, (_, token) in first.items():
        assert token.startswith(pod_name + " ")
    # a deleted pod comes back on its claim, on the node its volume lives on
    lab.kubectl("delete", "pod", "keep-0", "--wait=true", "--timeout=60s")
    assert tokens(lab, "keep", 3) == first
    # scale 3 → 1 → 3: the claims stay (whenScaled: Retain) and each ordinal finds its data again
    lab.kubectl("scale", "statefulset", "keep", "--replicas=1")
    running(lab, "app=keep", 1)
    claims = {c["metadata"]["name"] for c in lab.get("pvc")["items"]}
    assert {"data-keep-0", "data-keep-1", "data-keep-2"} <= claims
    lab.kubectl("scale", "statefulset", "keep", "--replicas=3")
    assert tokens(lab, "keep", 3) == first
    lab.kubectl("delete", "statefulset", "keep", "--wait=true", "--timeout=60s")
    lab.wait("the set's pods gone", lambda: not lab.pods("app=keep"))
    claims = {c["metadata"]["name"] for c in lab.get("pvc")["items"]}
    assert {"data-keep-0", "data-keep-1", "data-keep-2"} <= claims  # whenDeleted: Retain
    lab.kubectl("delete", "pvc", "data-keep-0", "data-keep-1", "data-keep-2", "--wait=true", "--timeout=60s")


def test_when_scaled_delete_removes_the_condemned_ordinals_claim(lab):
    lab.apply(statefulset("drop", 2, when_scaled="Delete"))
    tokens(lab, "drop", 2)
    path, pv = claim_path(lab, "data-drop-1")
    lab.kubectl("scale", "statefulset", "drop", "--replicas=1")

    def claim_gone():
        return "data-drop-1" not in {c["metadata"]["name"] for c in lab.get("pvc")["items"]}
    lab.wait("data-drop-1 deleted with its pod", claim_gone)
    lab.wait("its volume and directory removed",
             lambda: pv["metadata"]["name"] not in {v["metadata"]["name"] for v in lab.get("pv")["items"]}
             and not path.exists())
    assert "data-drop-0" in {c["metadata"]["name"] for c in lab.get("pvc")["items"]}
    lab.kubectl("delete", "statefulset", "drop", "--wait=true", "--timeout=60s")
    lab.kubectl("delete", "pvc", "data-drop-0", "--wait=true", "--timeout=60s")
