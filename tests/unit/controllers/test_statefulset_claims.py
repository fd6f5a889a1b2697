"""StatefulSet claims: ordinal names and persistentVolumeClaimRetentionPolicy's owner references
(updateClaimOwnerRefForSetAndPod)."""

from __future__ import annotations

import pytest

from nodeagent.api.defaults import apply_defaults
from nodeagent.controllers import statefulset


def sts(when_deleted: str | None = None, when_scaled: str | None = None, replicas: int = 3) -> dict:
    spec = {"replicas": replicas, "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "c"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}
    policy = {k: v for k, v in (("whenDeleted", when_deleted), ("whenScaled", when_scaled)) if v}
    if policy:
        spec["persistentVolumeClaimRetentionPolicy"] = policy
    obj = {"apiVersion": "apps/v1", "kind": "StatefulSet",
           "metadata": {"name": "db", "namespace": "ns", "uid": "set-uid"}, "spec": spec}
    apply_defaults(obj, "StatefulSet")
    return obj


def pod(i: int) -> dict:
    return {"metadata": {"name": f"db-{i}", "namespace": "ns", "uid": f"pod-{i}"}}


SET_REF = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "set-uid"}


def test_defaults_and_claim_names():
    s = sts()
    policy = s["spec"]["persistentVolumeClaimRetentionPolicy"]
    assert policy == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    claims = statefulset.claims_for(s, 2)
    assert [c["metadata"]["name"] for c in claims] == ["data-db-2"]
    assert claims[0]["metadata"]["labels"] == {"app": "db"}


@pytest.mark.parametrize("deleted,scaled,ordinal,want", [
    ("Retain", "Retain", 0, []),
    ("Retain", "Retain", 5, []),
    ("Delete", "Retain", 0, [SET_REF]),
    ("Delete", "Retain", 5, [SET_REF]),
    ("Retain", "Delete", 0, []),
    ("Retain", "Delete", 5, [{"apiVersion": "v1", "kind": "Pod", "name": "db-5", "uid": "pod-5"}]),
    ("Delete", "Delete", 0, [SET_REF]),
    ("Delete", "Delete", 5, [{"apiVersion": "v1", "kind": "Pod", "name": "db-5", "uid": "pod-5"}]),
])
def test_retention_policy_owner_references(deleted, scaled, ordinal, want):
    s = sts(deleted, scaled)
    claim = statefulset.claims_for(s, ordinal)[0]
    assert statefulset.claim_owner_refs(s, claim, pod(ordinal)) == want


def test_other_owners_are_kept_and_stale_ones_dropped():
    s = sts("Retain", "Retain")
    claim = statefulset.claims_for(s, 0)[0]
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "x"}
    claim["metadata"]["ownerReferences"] = [other, SET_REF]
    assert statefulset.claim_owner_refs(s, claim, pod(0)) == [other]
