"""The PersistentVolume binder's decisions (kube-controller-manager's `persistentvolume-binder`).

Pure functions over a claim or a volume and what the caches hold; the loop (pvbinder_controller.py)
carries them out. `sync_claim` mirrors pv_controller.go's syncUnboundClaim/syncBoundClaim, `sync_volume`
its syncVolume: phases Pending/Bound/Lost for claims and Available/Bound/Released/Failed for volumes,
the two-way claimRef/volumeName bind, and what a released volume's reclaim policy asks for.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.api import storage

Obj = Mapping[str, Any]

NO_PROVISIONER = "kubernetes.io/no-provisioner"
MSG_WAIT_FIRST_CONSUMER = "waiting for first consumer to be created before binding"
MSG_NO_CLASS = "no persistent volumes available for this claim and no storage class is set"
MSG_CLAIM_LOST = "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!"
MSG_CLAIM_MISBOUND = "Bound claim has lost its PersistentVolume. Data on the volume is lost!"


def external_provisioning_message(provisioner: str) -> str:
    return (f"Waiting for a volume to be created either by the external provisioner '{provisioner}' or "
            "manually by the system administrator. If volume creation is delayed, please verify that the "
            "provisioner is running and correctly registered.")


@dataclasses.dataclass
class Event:
    type: str
    reason: str
    message: str


@dataclasses.dataclass
class ClaimAction:
    """What to write for one claim: a volume to bind it to, annotations to add, a phase, an event."""
    bind_to: Obj | None = None
    annotate: dict[str, str] = dataclasses.field(default_factory=dict)
    phase: str | None = None  # the claim's status.phase to write (None: leave it)
    event: Event | None = None


@dataclasses.dataclass
class VolumeAction:
    phase: str | None = None
    message: str = ""
    unbind: bool = False  # clear claimRef (the controller's half-made bind of a claim that went elsewhere)
    event: Event | None = None


def _phase(o: Obj) -> str:
    return (o.get("status") or {}).get("phase") or ""


def _name(o: Obj) -> str:
    return storage.meta(o).get("name", "")


def sync_claim(pvc: Obj, volumes: Iterable[Obj], classes: Mapping[str, Obj]) -> ClaimAction:
    """One look at a claim: bind it, ask for provisioning, or say why it waits."""
    out = ClaimAction()
    if storage.meta(pvc).get("deletionTimestamp"):
        return out
    ann = storage.annotations_of(pvc)
    cls_name = storage.claim_class(pvc)
    sc = classes.get(cls_name) if cls_name else None
    vols = list(volumes)
    vname = storage.spec(pvc).get("volumeName")
    if not vname:
        delay = storage.binding_mode(sc) == "WaitForFirstConsumer"
        pv = storage.find_matching_volume(pvc, vols, delay_binding=delay)
        if pv is not None:
            out.bind_to = pv
            out.phase = "Bound"
            return out
        if _phase(pvc) != "Pending":
            out.phase = "Pending"
        if delay and storage.ANN_SELECTED_NODE not in ann:
            out.event = Event("Normal", "WaitForFirstConsumer", MSG_WAIT_FIRST_CONSUMER)
        elif cls_name:
            if sc is None:
                out.event = Event("Warning", "ProvisioningFailed",
                                  f'storageclass.storage.k8s.io "{cls_name}" not found')
            elif sc.get("provisioner") == NO_PROVISIONER:
                out.event = Event("Warning", "ProvisioningFailed",
                                  f"no volume plugin matched name: {NO_PROVISIONER}")
            else:
                prov = sc.get("provisioner", "")
                if ann.get(storage.ANN_STORAGE_PROVISIONER) != prov:
                    out.annotate = {storage.ANN_STORAGE_PROVISIONER: prov,
                                    storage.ANN_BETA_STORAGE_PROVISIONER: prov}
                out.event = Event("Normal", "ExternalProvisioning", external_provisioning_message(prov))
        else:
            out.event = Event("Normal", "FailedBinding", MSG_NO_CLASS)
        return out
    # the claim names its volume
    pv = next((v for v in vols if _name(v) == vname), None)
    completed = ann.get(storage.ANN_BIND_COMPLETED) == "yes"
    if pv is None:
        if completed or _phase(pvc) == "Bound":
            if _phase(pvc) != "Lost":
                out.phase = "Lost"
                out.event = Event("Warning", "ClaimLost", MSG_CLAIM_LOST)
        elif _phase(pvc) != "Pending":
            out.phase = "Pending"
        return out
    ref = storage.spec(pv).get("claimRef")
    if not ref or storage.claim_ref_matches(pv, pvc):
        if not ref:  # pre-bound by the user: the volume must satisfy the claim
            why = volume_mismatch(pv, pvc)
            if why:
                out.event = Event("Warning", "VolumeMismatch", f'Cannot bind to requested volume "{vname}": '
                                                               f"{why}")
                if _phase(pvc) != "Pending":
                    out.phase = "Pending"
                return out
        out.bind_to = pv
        out.phase = "Bound"
        return out
    if completed:
        if _phase(pvc) != "Lost":
            out.phase = "Lost"
            out.event = Event("Warning", "ClaimMisbound", MSG_CLAIM_MISBOUND)
        return out
    out.event = Event("Warning", "FailedBinding", f'volume "{vname}" already bound to a different claim.')
    if _phase(pvc) != "Pending":
        out.phase = "Pending"
    return out


def volume_mismatch(pv: Obj, pvc: Obj) -> str:
    """checkVolumeSatisfyClaim: why a named volume cannot serve the claim ("" when it can)."""
    if storage.capacity(pv) < storage.requested_storage(pvc):
        return "requested PV is too small"
    if storage.volume_class(pv) != storage.claim_class(pvc):
        return "storageClassName does not match"
    if storage.volume_mode(pv) != storage.volume_mode(pvc):
        return "incompatible volumeMode"
    if not storage.access_modes_contain(storage.spec(pv).get("accessModes") or [],
                                        storage.spec(pvc).get("accessModes") or []):
        return "incompatible accessMode"
    return ""


def sync_volume(pv: Obj, claim: Obj | None) -> VolumeAction:
    """One look at a volume given the claim its claimRef names (None: absent or another uid)."""
    out = VolumeAction()
    phase = _phase(pv)
    ref = storage.spec(pv).get("claimRef")
    if not ref:
        if phase != "Available":
            out.phase = "Available"
        return out
    if not ref.get("uid") and (claim is None or not storage.spec(claim).get("volumeName")):
        if phase != "Available":  # pre-bound by the admin to a claim that does not exist or is unbound
            out.phase = "Available"
        return out
    if claim is not None and ref.get("uid") and storage.meta(claim).get("uid") != ref.get("uid"):
        claim = None
    if claim is None:
        if phase in ("Released", "Failed"):
            return out
        out.phase = "Released"
        policy = storage.spec(pv).get("persistentVolumeReclaimPolicy") or "Retain"
        if policy == "Delete" and storage.ANN_PROVISIONED_BY not in storage.annotations_of(pv):
            out.phase = "Failed"
            out.message = (f'error getting deleter volume plugin for volume "{_name(pv)}": '
                           "no deletable volume plugin matched")
            out.event = Event("Warning", "VolumeFailedDelete", out.message)
        elif policy == "Recycle":
            out.phase, out.message = "Failed", "No recycler plugin found for the volume!"
            out.event = Event("Warning", "VolumeFailedRecycle", out.message)
        return out
    vname = storage.spec(claim).get("volumeName")
    if vname == _name(pv):
        if phase != "Bound":
            out.phase = "Bound"
        return out
    if not vname:
        return out  # the controller bound the volume half; the claim's sync finishes it
    # the claim is bound to another volume: undo our half of a bind, or release a user's pre-bind
    if storage.annotations_of(pv).get(storage.ANN_BOUND_BY_CONTROLLER) == "yes":
        out.unbind = True
        out.phase = "Available"
    elif phase != "Released":
        out.phase = "Released"
    return out


def bound_volume(pv: Obj, pvc: Obj) -> dict[str, Any]:
    """The volume with its claimRef pointing at the claim (bound-by-controller when we chose it)."""
    new = copy.deepcopy(dict(pv))
    m = storage.meta(pvc)
    s = new.setdefault("spec", {})
    if not storage.claim_ref_matches(pv, pvc) or not (s.get("claimRef") or {}).get("uid"):
        if not s.get("claimRef"):
            new["metadata"].setdefault("annotations", {})[storage.ANN_BOUND_BY_CONTROLLER] = "yes"
        s["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": m.get("namespace"),
                         "name": m.get("name"), "uid": m.get("uid"),
                         "resourceVersion": m.get("resourceVersion")}
    return new


def bound_claim(pvc: Obj, pv: Obj) -> dict[str, Any]:
    """The claim with volumeName and the bind-completed annotations (bound-by-controller when we chose)."""
    new = copy.deepcopy(dict(pvc))
    ann = new["metadata"].setdefault("annotations", {})
    s = new.setdefault("spec", {})
    if not s.get("volumeName"):
        s["volumeName"] = _name(pv)
        ann[storage.ANN_BOUND_BY_CONTROLLER] = "yes"
    ann[storage.ANN_BIND_COMPLETED] = "yes"
    return new


def claim_status(pvc: Obj, pv: Obj | None, phase: str) -> dict[str, Any]:
    """status for a phase: a Bound claim reports the volume's access modes and capacity."""
    st = copy.deepcopy(dict(pvc.get("status") or {}))
    st["phase"] = phase
    if phase == "Bound" and pv is not None:
        st["accessModes"] = list(storage.spec(pv).get("accessModes") or [])
        cap = dict(storage.spec(pv).get("capacity") or {})
        if not (st.get("capacity") or {}).get("storage"):
            st["capacity"] = cap
    elif phase in ("Pending", "Lost"):
        if phase == "Pending":
            st.pop("accessModes", None)
            st.pop("capacity", None)
    return st


# -- protection (the pvc-protection and pv-protection controllers) --------------------------------------


def claim_in_use(pvc: Obj, pods: Iterable[Obj]) -> bool:
    """A pod not yet terminated (Succeeded/Failed) that names the claim (directly, or as its generic
    ephemeral volume) keeps the pvc-protection finalizer."""
    m = storage.meta(pvc)
    name, ns = m.get("name"), m.get("namespace")
    for pod in pods:
        pm = pod.get("metadata") or {}
        if pm.get("namespace") != ns or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        for v in (pod.get("spec") or {}).get("volumes") or []:
            src = v.get("persistentVolumeClaim")
            if src and src.get("claimName") == name:
                return True
            if "ephemeral" in v and f"{pm.get('name')}-{v.get('name')}" == name:
                return True
    return False


def without_finalizer(obj: Obj, finalizer: str) -> dict[str, Any] | None:
    """The object without the finalizer, or None when it does not carry it."""
    fins = list(storage.meta(obj).get("finalizers") or [])
    if finalizer not in fins:
        return None
    new = copy.deepcopy(dict(obj))
    new["metadata"]["finalizers"] = [f for f in fins if f != finalizer]
    return new
