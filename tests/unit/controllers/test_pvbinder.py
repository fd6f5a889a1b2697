"""The PV binder's decisions (pv_controller.go's syncClaim/syncVolume) and FindMatchingVolume."""

from __future__ import annotations

from typing import Any

from nodeagent.api import storage, validation
from nodeagent.controllers import pvbinder


def pv(name: str, size: str = "1Gi", cls: str = "", modes=("ReadWriteOnce",), phase: str = "Available",
       claim_ref: dict | None = None, labels: dict | None = None, policy: str = "Retain",
       **spec: Any) -> dict:
    s: dict[str, Any] = {"capacity": {"storage": size}, "accessModes": list(modes), "storageClassName": cls,
                         "persistentVolumeReclaimPolicy": policy, "hostPath": {"path": f"/tmp/{name}"},
                         **spec}
    if claim_ref is not None:
        s["claimRef"] = claim_ref
    return {"metadata": {"name": name, "labels": labels or {}, "annotations": {}}, "spec": s,
            "status": {"phase": phase}}


def pvc(name: str = "c", size: str = "1Gi", cls: str | None = "", modes=("ReadWriteOnce",),
        ns: str = "default", uid: str = "u1", volume: str = "", phase: str = "Pending", **spec: Any) -> dict:
    s: dict[str, Any] = {"accessModes": list(modes), "resources": {"requests": {"storage": size}}, **spec}
    if cls is not None:
        s["storageClassName"] = cls
    if volume:
        s["volumeName"] = volume
    return {"metadata": {"name": name, "namespace": ns, "uid": uid, "annotations": {}}, "spec": s,
            "status": {"phase": phase}}


def ref(claim: dict) -> dict:
    return {"name": claim["metadata"]["name"], "namespace": claim["metadata"]["namespace"],
            "uid": claim["metadata"]["uid"]}


def matched(*args: Any, **kw: Any) -> str | None:
    """The name of the volume FindMatchingVolume picks (None: none)."""
    v = storage.find_matching_volume(*args, **kw)
    return None if v is None else v["metadata"]["name"]


def ev(act: pvbinder.ClaimAction | pvbinder.VolumeAction) -> pvbinder.Event:
    assert act.event is not None
    return act.event


NODE1 = {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "zone": "a"}}}
NODE2 = {"metadata": {"name": "n2", "labels": {"kubernetes.io/hostname": "n2", "zone": "b"}}}


def pinned(node: str) -> dict:
    return {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}


# -- matching ---------------------------------------------------------------------------------------------


def test_smallest_volume_that_fits_wins():
    vols = [pv("big", "10Gi"), pv("small", "500Mi"), pv("fit", "2Gi"), pv("exact", "1Gi")]
    assert matched(pvc(), vols) == "exact"
    assert matched(pvc(size="1.5Gi"), vols) == "fit"
    assert matched(pvc(size="20Gi"), vols) is None


def test_class_modes_selector_and_volume_mode_must_match():
    vols = [pv("fast", cls="fast"), pv("rwx", modes=("ReadWriteMany",)), pv("lab", labels={"disk": "ssd"}),
            pv("block", volumeMode="Block")]
    assert matched(pvc(cls="fast"), vols) == "fast"
    assert matched(pvc(modes=("ReadWriteMany",)), vols) == "rwx"
    sel = pvc(selector={"matchLabels": {"disk": "ssd"}})
    assert matched(sel, vols) == "lab"
    assert matched(pvc(cls="fast", volumeMode="Block"), vols) is None
    assert matched(pvc(volumeMode="Block"), vols) == "block"


def test_volumes_bound_elsewhere_or_not_available_are_skipped():
    other = pvc("other", uid="u2")
    vols = [pv("taken", claim_ref=ref(other), phase="Bound"), pv("released", phase="Released")]
    assert matched(pvc(), vols) is None


def test_prebound_volume_wins_and_node_affinity_decides_on_the_scheduler_path():
    c = pvc()
    vols = [pv("any", "1Gi"), pv("mine", "5Gi", claim_ref={"name": "c", "namespace": "default"},
                                 nodeAffinity=pinned("n2"))]
    assert matched(c, vols) == "mine"
    assert matched(c, vols, NODE1) is None
    assert matched(c, vols, NODE2) == "mine"


def test_delay_binding_without_node_binds_only_prebound():
    vols = [pv("free")]
    assert matched(pvc(), vols, delay_binding=True) is None
    vols_nodes = [pv("on1", nodeAffinity=pinned("n1")), pv("on2", "2Gi", nodeAffinity=pinned("n2"))]
    assert matched(pvc(), vols_nodes, NODE2) == "on2"
    assert matched(pvc(), vols_nodes, NODE2, excluded=["on2"]) is None


# -- claims -----------------------------------------------------------------------------------------------


def test_unbound_claim_binds_to_a_match():
    act = pvbinder.sync_claim(pvc(), [pv("v1")], {})
    assert act.bind_to is not None
    assert act.bind_to["metadata"]["name"] == "v1" and act.phase == "Bound"
    bound_pv = pvbinder.bound_volume(act.bind_to, pvc())
    assert bound_pv["spec"]["claimRef"]["uid"] == "u1"
    assert bound_pv["metadata"]["annotations"][storage.ANN_BOUND_BY_CONTROLLER] == "yes"
    bound = pvbinder.bound_claim(pvc(), bound_pv)
    assert bound["spec"]["volumeName"] == "v1"
    assert bound["metadata"]["annotations"][storage.ANN_BIND_COMPLETED] == "yes"
    st = pvbinder.claim_status(bound, bound_pv, "Bound")
    assert st == {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}


def test_no_class_no_volume_says_so():
    act = pvbinder.sync_claim(pvc(), [], {})
    assert act.bind_to is None
    assert (ev(act).type, ev(act).reason) == ("Normal", "FailedBinding")
    assert ev(act).message == "no persistent volumes available for this claim and no storage class is set"


def test_wait_for_first_consumer_then_external_provisioning():
    sc = {"metadata": {"name": "local-path"}, "provisioner": "rancher.io/local-path",
          "volumeBindingMode": "WaitForFirstConsumer"}
    act = pvbinder.sync_claim(pvc(cls="local-path"), [pv("v1", cls="local-path")], {"local-path": sc})
    assert act.bind_to is None
    assert ev(act).reason == "WaitForFirstConsumer"
    assert ev(act).message == "waiting for first consumer to be created before binding"
    selected = pvc(cls="local-path")
    selected["metadata"]["annotations"][storage.ANN_SELECTED_NODE] = "n1"
    act = pvbinder.sync_claim(selected, [], {"local-path": sc})
    assert act.annotate == {storage.ANN_STORAGE_PROVISIONER: "rancher.io/local-path",
                            storage.ANN_BETA_STORAGE_PROVISIONER: "rancher.io/local-path"}
    assert ev(act).reason == "ExternalProvisioning" and "'rancher.io/local-path'" in ev(act).message


def test_missing_class_is_a_provisioning_failure():
    act = pvbinder.sync_claim(pvc(cls="nope"), [], {})
    assert ev(act).type == "Warning" and ev(act).reason == "ProvisioningFailed"
    assert ev(act).message == 'storageclass.storage.k8s.io "nope" not found'


def test_claim_naming_a_volume_too_small_is_a_mismatch():
    act = pvbinder.sync_claim(pvc(size="5Gi", volume="v1"), [pv("v1")], {})
    assert act.bind_to is None and ev(act).reason == "VolumeMismatch"
    assert "requested PV is too small" in ev(act).message


def test_bound_claim_whose_volume_vanished_is_lost():
    c = pvc(volume="v1", phase="Bound")
    c["metadata"]["annotations"][storage.ANN_BIND_COMPLETED] = "yes"
    act = pvbinder.sync_claim(c, [], {})
    assert act.phase == "Lost" and ev(act).reason == "ClaimLost"


def test_volume_bound_to_another_claim():
    other = pvc("other", uid="u2")
    act = pvbinder.sync_claim(pvc(volume="v1"), [pv("v1", claim_ref=ref(other), phase="Bound")], {})
    assert act.bind_to is None and ev(act).message == 'volume "v1" already bound to a different claim.'


# -- volumes ----------------------------------------------------------------------------------------------


def test_volume_phases():
    c = pvc(volume="v1", phase="Bound")
    assert pvbinder.sync_volume(pv("v1", phase=""), None).phase == "Available"
    assert pvbinder.sync_volume(pv("v1", claim_ref=ref(c), phase="Available"), c).phase == "Bound"
    released = pvbinder.sync_volume(pv("v1", claim_ref=ref(c), phase="Bound"), None)
    assert released.phase == "Released" and released.event is None  # Retain
    recreated = pvc(volume="", uid="u-new")  # same name, another claim: the old one is gone
    assert pvbinder.sync_volume(pv("v1", claim_ref=ref(c), phase="Bound"), recreated).phase == "Released"


def test_delete_without_a_deleter_fails_and_dynamic_waits_for_its_provisioner():
    c = pvc(volume="v1", phase="Bound")
    failed = pvbinder.sync_volume(pv("v1", claim_ref=ref(c), phase="Bound", policy="Delete"), None)
    assert failed.phase == "Failed" and ev(failed).reason == "VolumeFailedDelete"
    dyn = pv("v1", claim_ref=ref(c), phase="Bound", policy="Delete")
    dyn["metadata"]["annotations"][storage.ANN_PROVISIONED_BY] = "rancher.io/local-path"
    act = pvbinder.sync_volume(dyn, None)
    assert act.phase == "Released" and act.event is None


def test_half_bound_volume_of_a_claim_that_went_elsewhere_is_unbound():
    c = pvc(volume="v2", phase="Bound")
    v = pv("v1", claim_ref=ref(c), phase="Bound")
    v["metadata"]["annotations"][storage.ANN_BOUND_BY_CONTROLLER] = "yes"
    act = pvbinder.sync_volume(v, c)
    assert act.unbind and act.phase == "Available"


# -- protection -------------------------------------------------------------------------------------------


def test_claim_in_use_by_a_live_pod():
    pod = {"metadata": {"name": "p", "namespace": "default"}, "status": {"phase": "Running"},
           "spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}}
    assert pvbinder.claim_in_use(pvc(), [pod])
    assert not pvbinder.claim_in_use(pvc(), [{**pod, "status": {"phase": "Succeeded"}}])
    assert not pvbinder.claim_in_use(pvc(ns="other"), [pod])
    fin = pvc()
    fin["metadata"]["finalizers"] = [storage.PVC_PROTECTION, "x"]
    dropped = pvbinder.without_finalizer(fin, storage.PVC_PROTECTION)
    assert dropped is not None and dropped["metadata"]["finalizers"] == ["x"]
    assert pvbinder.without_finalizer(pvc(), storage.PVC_PROTECTION) is None


# -- validation -------------------------------------------------------------------------------------------


def test_validation_names_the_fields():
    bad = {"metadata": {"name": "c", "namespace": "default"}, "spec": {"accessModes": ["Sometimes"]}}
    errs = validation.validate(bad, "PersistentVolumeClaim", True)
    fields = {e["field"] for e in errs}
    assert fields == {"spec.accessModes", "spec.resources[storage]"}
    local_without_affinity = {"metadata": {"name": "v"}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "local": {"path": "/mnt/x"},
        "persistentVolumeReclaimPolicy": "Retain"}}
    errs = validation.validate(local_without_affinity, "PersistentVolume", False)
    assert [e["field"] for e in errs] == ["spec.nodeAffinity"]
    old = pvc(size="2Gi", phase="Bound")
    errs = validation.validate_update(pvc(size="1Gi"), old, "PersistentVolumeClaim")
    assert errs and errs[0]["field"] == "spec.resources.requests.storage"
    assert validation.validate_update(pvc(size="3Gi"), old, "PersistentVolumeClaim") == []
    changed = pvc(size="3Gi", modes=("ReadWriteMany",))
    assert validation.validate_update(changed, old, "PersistentVolumeClaim")[0]["field"] == "spec"


def test_resize_needs_a_bound_claim_and_a_class_that_allows_expansion():
    pending = pvc(size="1Gi")
    errs = validation.validate_update(pvc(size="2Gi"), pending, "PersistentVolumeClaim")
    assert [e["field"] for e in errs] == ["spec"]
    bound = pvc(size="1Gi", cls="fast", phase="Bound")
    grown = pvc(size="2Gi", cls="fast", phase="Bound")
    assert storage.resize_allowed(grown, bound, {"metadata": {"name": "fast"}, "allowVolumeExpansion": True})
    assert not storage.resize_allowed(grown, bound, {"metadata": {"name": "fast"}})
    assert not storage.resize_allowed(grown, bound, None)
    assert storage.resize_allowed(bound, bound, None)  # no bigger request: nothing to admit


def test_default_class_is_the_newest_default():
    a = {"metadata": {"name": "a", "creationTimestamp": "2024-01-01T00:00:00Z",
                      "annotations": {storage.ANN_DEFAULT_CLASS: "true"}}}
    b = {"metadata": {"name": "b", "creationTimestamp": "2025-01-01T00:00:00Z",
                      "annotations": {storage.ANN_DEFAULT_CLASS: "true"}}}
    c = {"metadata": {"name": "c", "creationTimestamp": "2026-01-01T00:00:00Z"}}
    chosen = storage.default_class([a, b, c])
    assert chosen is not None and chosen["metadata"]["name"] == "b"
    assert storage.default_class([c]) is None
