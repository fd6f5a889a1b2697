"""The ephemeral volume controller's claims: `<pod>-<volume>` from the template, owned by the pod."""

from nodeagent.controllers.ephemeral_controller import claims_for, owned_by


def test_claims_for_a_pods_ephemeral_volumes():
    tpl = {"metadata": {"labels": {"a": "b"}}, "spec": {"accessModes": ["ReadWriteOnce"],
                                                      "resources": {"requests": {"storage": "1Gi"}}}}
    pod = {"metadata": {"name": "web", "namespace": "ns", "uid": "u"},
           "spec": {"volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": tpl}},
                                {"name": "cfg", "configMap": {"name": "c"}}]}}
    [pvc] = claims_for(pod)
    assert pvc["metadata"]["name"] == "web-scratch" and pvc["metadata"]["namespace"] == "ns"
    assert pvc["metadata"]["labels"] == {"a": "b"} and pvc["spec"] == tpl["spec"]
    assert pvc["metadata"]["ownerReferences"] == [{
        "apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "u", "controller": True,
        "blockOwnerDeletion": True}]
    assert owned_by(pvc, pod)
    assert not owned_by({"metadata": {}}, pod)
