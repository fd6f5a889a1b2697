"""NodeRestriction's storage rule: a node writes only volumes pinned to it and the status of claims
selected for it (its local-path provisioner; the kubelet's resize)."""

from __future__ import annotations

from nodeagent.apiserver.auth import node_may, pinned_node


def pv(*values: str, key: str = "kubernetes.io/hostname") -> dict:
    return {"metadata": {"name": "pvc-1"}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}]}}}}


def test_pinned_node():
    assert pinned_node(pv("n1")) == "n1"
    assert pinned_node(pv("n1", "n2")) is None
    assert pinned_node(pv("n1", key="zone")) is None
    assert pinned_node({"spec": {}}) is None


def test_a_node_writes_only_its_own_volumes():
    for verb in ("create", "update", "delete"):
        assert node_may("n1", verb, "persistentvolumes", "", "", "pvc-1", pv("n1")) is None
        why = node_may("n1", verb, "persistentvolumes", "", "", "pvc-1", pv("n2"))
        assert why is not None and "pins them to it" in why
    assert node_may("n1", "create", "persistentvolumes", "", "", "x", {"spec": {"hostPath": {}}}) is not None
    assert node_may("n1", "update", "persistentvolumes", "status", "", "pvc-1", pv("n1")) is not None


def test_a_node_updates_the_status_of_claims_selected_for_it():
    mine = {"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "n1"}}}
    other = {"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "n2"}}}
    assert node_may("n1", "update", "persistentvolumeclaims", "status", "ns", "c", mine) is None
    assert node_may("n1", "update", "persistentvolumeclaims", "status", "ns", "c", other) is not None
    assert node_may("n1", "update", "persistentvolumeclaims", "", "ns", "c", mine) is not None
