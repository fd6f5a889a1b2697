"""PersistentVolumes, claims and StorageClasses: the well-known names, defaults, validation and matching.

One place for what the PV binder (controllers), the VolumeBinding plugin (scheduler), the provisioner and
the kubelet all need to agree on: which class a claim asks for, whether a volume satisfies a claim
(pkg/controller/volume/persistentvolume/util's FindMatchingVolume: the smallest volume that fits), and
whether a volume's nodeAffinity admits a node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.api.quantity import parse_quantity
from nodeagent.api.selectors import from_label_selector, node_matches_selector_terms

Obj = Mapping[str, Any]
FieldErrors = list[dict[str, str]]

# annotations (k8s.io/component-helpers/storage/volume and the external-provisioner library)
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
ANN_BETA_STORAGE_PROVISIONER = "volume.beta.kubernetes.io/storage-provisioner"
ANN_BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
ANN_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
ANN_BETA_DEFAULT_CLASS = "storageclass.beta.kubernetes.io/is-default-class"

PV_PROTECTION = "kubernetes.io/pv-protection"
PVC_PROTECTION = "kubernetes.io/pvc-protection"

ACCESS_MODES = ("ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod")
RECLAIM_POLICIES = ("Retain", "Delete", "Recycle")
BINDING_MODES = ("Immediate", "WaitForFirstConsumer")
VOLUME_MODES = ("Filesystem", "Block")
# the PV sources nodeagent's kubelet can mount; others are accepted (Kubernetes accepts them) and the
# kubelet refuses them with FailedMount naming the type
PV_SOURCES = ("hostPath", "local", "csi", "nfs", "iscsi", "fc", "flexVolume", "rbd", "cephfs",
              "awsElasticBlockStore", "gcePersistentDisk", "azureDisk", "azureFile", "glusterfs",
              "cinder", "portworxVolume", "quobyte", "scaleIO", "storageos", "vsphereVolume",
              "photonPersistentDisk", "flocker")
HOSTNAME_LABEL = "kubernetes.io/hostname"


# -- reading ----------------------------------------------------------------------------------------------


def meta(o: Obj) -> Mapping[str, Any]:
    return o.get("metadata") or {}


def annotations_of(o: Obj) -> Mapping[str, str]:
    return meta(o).get("annotations") or {}


def spec(o: Obj) -> Mapping[str, Any]:
    return o.get("spec") or {}


def claim_class(pvc: Obj) -> str:
    """GetPersistentVolumeClaimClass: the beta annotation wins over spec.storageClassName."""
    ann = annotations_of(pvc)
    if ANN_BETA_STORAGE_CLASS in ann:
        return ann[ANN_BETA_STORAGE_CLASS]
    return spec(pvc).get("storageClassName") or ""


def volume_class(pv: Obj) -> str:
    ann = annotations_of(pv)
    if ANN_BETA_STORAGE_CLASS in ann:
        return ann[ANN_BETA_STORAGE_CLASS]
    return spec(pv).get("storageClassName") or ""


def requested_storage(pvc: Obj) -> int:
    q = ((spec(pvc).get("resources") or {}).get("requests") or {}).get("storage")
    return int(parse_quantity(q)) if q is not None else 0


def capacity(pv: Obj) -> int:
    q = (spec(pv).get("capacity") or {}).get("storage")
    return int(parse_quantity(q)) if q is not None else 0


def volume_mode(o: Obj) -> str:
    return spec(o).get("volumeMode") or "Filesystem"


def is_default_class(sc: Obj) -> bool:
    ann = annotations_of(sc)
    return ann.get(ANN_DEFAULT_CLASS) == "true" or ann.get(ANN_BETA_DEFAULT_CLASS) == "true"


def default_class(classes: Iterable[Obj]) -> Obj | None:
    """The DefaultStorageClass admission plugin's choice: of several defaults, the newest (then by name)."""
    defaults = [c for c in classes if is_default_class(c)]
    if not defaults:
        return None
    return max(defaults, key=lambda c: (meta(c).get("creationTimestamp") or "", meta(c).get("name", "")))


def binding_mode(sc: Obj | None) -> str:
    return (sc or {}).get("volumeBindingMode") or "Immediate"


def claim_ref_matches(pv: Obj, pvc: Obj) -> bool:
    """IsVolumeBoundToClaim: the volume's claimRef names this claim (and its uid, when set)."""
    ref = spec(pv).get("claimRef")
    if not ref:
        return False
    m = meta(pvc)
    if ref.get("name") != m.get("name") or (ref.get("namespace") or "") != (m.get("namespace") or ""):
        return False
    return not ref.get("uid") or ref.get("uid") == m.get("uid")


def node_affinity_terms(pv: Obj) -> list[Mapping[str, Any]] | None:
    req = (spec(pv).get("nodeAffinity") or {}).get("required")
    return None if not req else list(req.get("nodeSelectorTerms") or [])


def node_affinity_allows(pv: Obj, node: Obj) -> bool:
    """CheckNodeAffinity: no nodeAffinity means every node."""
    terms = node_affinity_terms(pv)
    return terms is None or node_matches_selector_terms(node, terms)


def access_modes_contain(have: Iterable[str], want: Iterable[str]) -> bool:
    h = set(have)
    return all(m in h for m in want)


# -- matching ---------------------------------------------------------------------------------------------


def find_matching_volume(pvc: Obj, volumes: Iterable[Obj], node: Obj | None = None,
                         excluded: Iterable[str] = (), delay_binding: bool = False) -> Obj | None:
    """FindMatchingVolume: the volume pre-bound to the claim, else the smallest Available one of the
    claim's class, access modes (a superset), volumeMode and selector with enough capacity; with a node
    (the scheduler's path) the volume's nodeAffinity must admit it. With delay_binding and no node (the
    PV controller on a WaitForFirstConsumer claim) only a pre-bound volume matches."""
    want = requested_storage(pvc)
    modes = spec(pvc).get("accessModes") or []
    selector = spec(pvc).get("selector")
    sel = from_label_selector(selector) if selector else None
    cls = claim_class(pvc)
    skip = set(excluded)
    best: Obj | None = None
    for pv in volumes:
        name = meta(pv).get("name", "")
        if name in skip or capacity(pv) < want or not access_modes_contain(spec(pv).get("accessModes") or [],
                                                                          modes):
            continue
        if volume_mode(pv) != volume_mode(pvc) or meta(pv).get("deletionTimestamp"):
            continue
        affinity_ok = node is None or node_affinity_allows(pv, node)
        if claim_ref_matches(pv, pvc):
            return pv if affinity_ok else None
        if node is None and delay_binding:
            continue
        if (pv.get("status") or {}).get("phase") != "Available" or spec(pv).get("claimRef"):
            continue
        if sel is not None and not sel.matches(meta(pv).get("labels") or {}):
            continue
        if volume_class(pv) != cls or not affinity_ok:
            continue
        if best is None or capacity(best) > capacity(pv):
            best = pv
    return best


# -- defaults ---------------------------------------------------------------------------------------------


def default_pv(obj: dict[str, Any]) -> None:
    s = obj.setdefault("spec", {})
    s.setdefault("persistentVolumeReclaimPolicy", "Retain")
    s.setdefault("volumeMode", "Filesystem")
    if "hostPath" in s and isinstance(s["hostPath"], dict):
        s["hostPath"].setdefault("type", "")


def default_pvc(obj: dict[str, Any]) -> None:
    obj.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")


def default_sc(obj: dict[str, Any]) -> None:
    obj.setdefault("reclaimPolicy", "Delete")
    obj.setdefault("volumeBindingMode", "Immediate")


# -- validation -------------------------------------------------------------------------------------------


def _err(reason: str, field: str, message: str) -> dict[str, str]:
    return {"reason": reason, "field": field, "message": message}


def _required(field: str, message: str = "Required value") -> dict[str, str]:
    return _err("FieldValueRequired", field, message)


def _unsupported(field: str, value: Any, allowed: Iterable[str]) -> dict[str, str]:
    return _err("FieldValueNotSupported", field,
                f'Unsupported value: "{value}": supported values: ' + ", ".join(f'"{a}"' for a in allowed))


def _quantity(field: str, value: Any) -> list[dict[str, str]]:
    try:
        q = parse_quantity(value)
    except (ValueError, TypeError):
        return [_err("FieldValueInvalid", field, f"Invalid value: \"{value}\": quantities must match the "
                     "regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    if q <= 0:
        return [_err("FieldValueInvalid", field, f'Invalid value: "{value}": must be greater than zero')]
    return []


def _access_modes(modes: Any, field: str) -> FieldErrors:
    if not modes:
        return [_required(field, "Required value: at least 1 access mode is required")]
    errs = [_unsupported(field, m, ACCESS_MODES) for m in modes if m not in ACCESS_MODES]
    if "ReadWriteOncePod" in modes and len(modes) > 1:
        errs.append(_err("FieldValueForbidden", field,
                         "Forbidden: may not use ReadWriteOncePod with other access modes"))
    return errs


def validate_pv(obj: Obj) -> FieldErrors:
    s = spec(obj)
    errs = _access_modes(s.get("accessModes"), "spec.accessModes")
    cap = (s.get("capacity") or {})
    if "storage" not in cap:
        errs.append(_required("spec.capacity", "Required value"))
    else:
        errs += _quantity("spec.capacity.storage", cap["storage"])
    sources = [k for k in PV_SOURCES if k in s]
    if not sources:
        errs.append(_required("spec", "Required value: must specify a volume type"))
    elif len(sources) > 1:
        errs.append(_err("FieldValueForbidden", f"spec.{sources[1]}",
                         "Forbidden: may not specify more than 1 volume type"))
    rp = s.get("persistentVolumeReclaimPolicy")
    if rp not in RECLAIM_POLICIES:
        errs.append(_unsupported("spec.persistentVolumeReclaimPolicy", rp, RECLAIM_POLICIES))
    if volume_mode(obj) not in VOLUME_MODES:
        errs.append(_unsupported("spec.volumeMode", volume_mode(obj), VOLUME_MODES))
    for kind in ("hostPath", "local"):
        if kind in s:
            p = (s[kind] or {}).get("path")
            if not p:
                errs.append(_required(f"spec.{kind}.path"))
            elif not str(p).startswith("/") or ".." in str(p).split("/"):
                errs.append(_err("FieldValueInvalid", f"spec.{kind}.path",
                                 f'Invalid value: "{p}": must be an absolute path without \'..\''))
    if isinstance(s.get("flexVolume"), dict) and not s["flexVolume"].get("driver"):
        errs.append(_required("spec.flexVolume.driver"))
    if "local" in s and node_affinity_terms(obj) is None:
        errs.append(_required("spec.nodeAffinity", "Required value: Local volume requires node affinity"))
    na = s.get("nodeAffinity")
    if na is not None and not (na.get("required") or {}).get("nodeSelectorTerms"):
        errs.append(_required("spec.nodeAffinity.required.nodeSelectorTerms",
                              "Required value: must have at least one node selector term"))
    return errs


def validate_pvc(obj: Obj) -> FieldErrors:
    s = spec(obj)
    errs = []
    if not s.get("dataSource") and not s.get("dataSourceRef"):
        errs += _access_modes(s.get("accessModes"), "spec.accessModes")
    requests = ((s.get("resources") or {}).get("requests") or {})
    if "storage" not in requests:
        errs.append(_required("spec.resources[storage]"))
    else:
        errs += _quantity("spec.resources[storage]", requests["storage"])
    if volume_mode(obj) not in VOLUME_MODES:
        errs.append(_unsupported("spec.volumeMode", volume_mode(obj), VOLUME_MODES))
    return errs


def validate_sc(obj: Obj) -> FieldErrors:
    errs = []
    if not obj.get("provisioner"):
        errs.append(_required("provisioner"))
    rp = obj.get("reclaimPolicy")
    if rp not in ("Retain", "Delete", "Recycle"):
        errs.append(_unsupported("reclaimPolicy", rp, ("Delete", "Retain")))
    bm = obj.get("volumeBindingMode")
    if bm not in BINDING_MODES:
        errs.append(_unsupported("volumeBindingMode", bm, BINDING_MODES))
    return errs


def validate_pvc_update(new: Obj, old: Obj) -> FieldErrors:
    """ValidatePersistentVolumeClaimUpdate: the spec is immutable after creation except
    resources.requests (which may only grow) and a volumeName set on an unbound claim."""
    ns, os_ = dict(spec(new)), dict(spec(old))
    errs: FieldErrors = []
    new_req, old_req = requested_storage(new), requested_storage(old)
    if new_req < old_req and ((old.get("status") or {}).get("phase") == "Bound"):
        errs.append(_err("FieldValueForbidden", "spec.resources.requests.storage",
                         "Forbidden: field can not be less than status.capacity"))
    if (old.get("status") or {}).get("phase") == "Bound":  # only a bound claim may change its request
        for s in (ns, os_):
            s.pop("resources", None)
    if not os_.get("volumeName"):
        ns.pop("volumeName", None)
        os_.pop("volumeName", None)
    if ns != os_:
        errs.append(_err("FieldValueForbidden", "spec",
                         "Forbidden: spec is immutable after creation except resources.requests and "
                         "volumeAttributesClassName for bound claims"))
    return errs


def resize_allowed(new: Obj, old: Obj, sc: Obj | None) -> bool:
    """The PersistentVolumeClaimResize admission plugin: a bigger request needs the same class, and that
    class must exist and allow expansion."""
    if requested_storage(new) <= requested_storage(old):
        return True
    return claim_class(new) == claim_class(old) and sc is not None and bool(sc.get("allowVolumeExpansion"))


def validate_pv_update(new: Obj, old: Obj) -> FieldErrors:
    errs: FieldErrors = []
    for f in ("volumeMode",):
        if volume_mode(new) != volume_mode(old):
            errs.append(_err("FieldValueInvalid", f"spec.{f}", "field is immutable"))
    if spec(old).get("nodeAffinity") and spec(new).get("nodeAffinity") != spec(old).get("nodeAffinity"):
        errs.append(_err("FieldValueInvalid", "spec.nodeAffinity", "field is immutable"))
    for kind in PV_SOURCES:
        if kind in spec(old) and spec(new).get(kind) != spec(old).get(kind):
            errs.append(_err("FieldValueForbidden", "spec.persistentvolumesource",
                             "Forbidden: spec.persistentvolumesource is immutable after creation"))
            break
    return errs


def validate_sc_update(new: Obj, old: Obj) -> FieldErrors:
    errs = []
    for f in ("provisioner", "parameters", "reclaimPolicy", "volumeBindingMode"):
        if new.get(f) != old.get(f):
            errs.append(_err("FieldValueForbidden", f, "Forbidden: updates to " + f + " are forbidden."))
    return errs
