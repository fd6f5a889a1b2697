"""Admission on create: PriorityClass resolution, LimitRange defaults and bounds, ResourceQuota enforcement,
the default IngressClass.

What an object charges against a quota is `nodeagent.api.quota` (shared with the quota controller's recount).
"""

from __future__ import annotations

import secrets
from fractions import Fraction
from typing import Any

from nodeagent.api.quantity import QuantityError, format_quantity, parse_quantity
from nodeagent.api.quota import object_usage
from nodeagent.api.resources import Resource
from nodeagent.apiserver.errors import ApiError

SYSTEM_PRIORITY_CLASSES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}


def forbidden(message: str, resource: str, name: str) -> ApiError:
    return ApiError(403, "Forbidden", message, {"name": name, "kind": resource})


def resolve_priority(pod: dict[str, Any], classes: list[dict[str, Any]]) -> None:
    spec = pod.setdefault("spec", {})
    name = spec.get("priorityClassName")
    if name:
        pc = next((c for c in classes if c["metadata"]["name"] == name), None)
        if pc is None:
            raise forbidden(f'pods "{pod["metadata"].get("name", "")}" is forbidden: no '
                            'PriorityClass with name '
                            f"{name} was found", "pods", pod["metadata"].get("name", ""))
    else:
        pc = next((c for c in classes if c.get("globalDefault")), None)
        if pc:
            spec["priorityClassName"] = pc["metadata"]["name"]
    value = pc.get("value", 0) if pc else 0
    if spec.get("priority") is not None and spec["priority"] != value:
        raise forbidden(f"the integer value of priority ({spec['priority']}) must not be provided "
                        f"in pod spec; priority admission controller computed {value} from the given "
                        "PriorityClass name", "pods", pod["metadata"].get("name", ""))
    spec["priority"] = value
    if pc and pc.get("preemptionPolicy"):
        spec["preemptionPolicy"] = pc["preemptionPolicy"]


def pull_secrets_from_service_account(pod: dict[str, Any], accounts: list[dict[str, Any]]) -> None:
    """The ServiceAccount admission plugin's image pull secrets: a pod naming none gets its account's (a
    mirror pod is left as its static pod was written)."""
    meta = pod.get("metadata") or {}
    spec = pod.setdefault("spec", {})
    if spec.get("imagePullSecrets") or "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return
    name = spec.get("serviceAccountName") or "default"
    sa = next((a for a in accounts if (a.get("metadata") or {}).get("name") == name), None)
    refs = [{"name": r["name"]} for r in (sa or {}).get("imagePullSecrets") or [] if r.get("name")]
    if refs:
        spec["imagePullSecrets"] = refs


def apply_runtime_class(pod: dict[str, Any], classes: list[dict[str, Any]]) -> None:
    """kube-apiserver's RuntimeClass admission: the class must exist; its overhead.podFixed becomes the pod's
    spec.overhead (a different one set by hand is refused); its scheduling nodeSelector and tolerations are
    merged into the pod's (a conflicting nodeSelector value is refused)."""
    spec = pod.setdefault("spec", {})
    pname = pod["metadata"].get("name", "")

    def refuse(why: str) -> ApiError:
        return forbidden(f'pods "{pname}" is forbidden: {why}', "pods", pname)

    name = spec.get("runtimeClassName")
    if not name:
        if spec.get("overhead"):
            raise refuse("pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead")
        return
    rc = next((c for c in classes if c["metadata"]["name"] == name), None)
    if rc is None:
        raise refuse(f'pod rejected: RuntimeClass "{name}" not found')
    fixed = (rc.get("overhead") or {}).get("podFixed")
    if spec.get("overhead") is not None:
        if fixed is None or {k: parse_quantity(v) for k, v in spec["overhead"].items()} != \
                {k: parse_quantity(v) for k, v in fixed.items()}:
            raise refuse("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead")
    elif fixed:
        spec["overhead"] = dict(fixed)
    sched = rc.get("scheduling") or {}
    selector = spec.get("nodeSelector") or {}
    for k, v in (sched.get("nodeSelector") or {}).items():
        if k in selector and selector[k] != v:
            raise refuse(f"conflict: runtimeClass.scheduling.nodeSelector[{k}] = {v}; "
                         f"pod.spec.nodeSelector[{k}] = {selector[k]}")
        selector[k] = v
    if selector:
        spec["nodeSelector"] = selector
    tolerations = spec.get("tolerations") or []
    for t in sched.get("tolerations") or []:
        if t not in tolerations:
            tolerations.append(t)
    if tolerations:
        spec["tolerations"] = tolerations


DEFAULT_INGRESS_CLASS = "ingressclass.kubernetes.io/is-default-class"


def default_ingress_class(ingress: dict[str, Any], classes: list[dict[str, Any]]) -> None:
    """kube-apiserver's DefaultIngressClass: an Ingress created naming no class (neither the field nor the
    deprecated annotation) gets the default IngressClass; with several defaults, the newest."""
    spec = ingress.setdefault("spec", {})
    annotations = (ingress.get("metadata") or {}).get("annotations") or {}
    if spec.get("ingressClassName") or annotations.get("kubernetes.io/ingress.class"):
        return
    defaults = [c for c in classes
                if ((c.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_INGRESS_CLASS) == "true"]
    if defaults:
        newest = max(defaults, key=lambda c: (c["metadata"].get("creationTimestamp") or "",
                                              c["metadata"]["name"]))
        spec["ingressClassName"] = newest["metadata"]["name"]


SA_MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
SA_VOLUME_PREFIX = "kube-api-access-"
_RAND_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # k8s.io/apimachinery's utilrand.String


def service_account_volume(name: str) -> dict[str, Any]:
    """The projected volume the ServiceAccount admission plugin adds: a pod-bound token (3607 s, which the
    apiserver extends), the cluster CA from kube-root-ca.crt, the namespace."""
    return {"name": name, "projected": {"defaultMode": 0o644, "sources": [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}


def admit_service_account(pod: dict[str, Any], accounts: list[dict[str, Any]]) -> None:
    """The ServiceAccount admission plugin on a new pod: its account must exist (403 otherwise); unless the
    pod or the account turns automountServiceAccountToken off, a `kube-api-access-<5>` projected volume is
    added and mounted read-only at /var/run/secrets/kubernetes.io/serviceaccount in every container and
    init container that mounts nothing there; the account's imagePullSecrets when the pod names none.
    A mirror pod is left as its static pod was written."""
    meta = pod.get("metadata") or {}
    if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
        return
    spec = pod.setdefault("spec", {})
    name = spec.get("serviceAccountName") or "default"
    sa = next((a for a in accounts if (a.get("metadata") or {}).get("name") == name), None)
    if sa is None:
        pname, ns = meta.get("name") or meta.get("generateName", ""), meta.get("namespace", "")
        raise forbidden(f'pods "{pname}" is forbidden: error looking up service account {ns}/{name}: '
                        f'serviceaccount "{name}" not found', "pods", pname)
    pull_secrets_from_service_account(pod, accounts)
    automount = spec.get("automountServiceAccountToken")
    if automount is None:
        automount = sa.get("automountServiceAccountToken")
    if automount is False:
        return
    volumes = spec.setdefault("volumes", [])
    existing = next((v["name"] for v in volumes if str(v.get("name", "")).startswith(SA_VOLUME_PREFIX)), None)
    vol_name = existing or SA_VOLUME_PREFIX + "".join(secrets.choice(_RAND_ALPHABET) for _ in range(5))
    added = False
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        mounts = c.setdefault("volumeMounts", [])
        if any(m.get("mountPath") == SA_MOUNT_PATH for m in mounts):
            continue
        mounts.append({"name": vol_name, "readOnly": True, "mountPath": SA_MOUNT_PATH})
        added = True
    if added and existing is None:
        volumes.append(service_account_volume(vol_name))
    if not volumes:
        del spec["volumes"]


def apply_limit_ranges(pod: dict[str, Any], ranges: list[dict[str, Any]]) -> None:
    """Fill container requests/limits from LimitRange defaults, then check min/max (403 like the seed)."""
    name = pod["metadata"].get("name", "")
    for lr in ranges:
        for item in (lr.get("spec") or {}).get("limits") or []:
            if item.get("type") != "Container":
                continue
            for c in (pod.get("spec") or {}).get("containers") or []:
                res = c.setdefault("resources", {})
                for k, v in (item.get("default") or {}).items():
                    res.setdefault("limits", {}).setdefault(k, v)
                for k, v in (item.get("defaultRequest") or {}).items():
                    res.setdefault("requests", {}).setdefault(k, v)
                for k, v in (res.get("limits") or {}).items():
                    res.setdefault("requests", {}).setdefault(k, v)
                try:
                    for k, mx in (item.get("max") or {}).items():
                        lim = (res.get("limits") or {}).get(k)
                        if lim is None:
                            raise forbidden(f'pods "{name}" is forbidden: maximum {k} usage per '
                                            f'Container is {mx}.  '
                                            f"No limit is specified", "pods", name)
                        if parse_quantity(lim) > parse_quantity(mx):
                            raise forbidden(f'pods "{name}" is forbidden: maximum {k} usage per '
                                            f'Container is {mx}, '
                                            f"but limit is {lim}", "pods", name)
                    for k, mn in (item.get("min") or {}).items():
                        req = (res.get("requests") or {}).get(k)
                        if req is None or parse_quantity(req) < parse_quantity(mn):
                            raise forbidden(f'pods "{name}" is forbidden: minimum {k} usage per '
                                            f'Container is {mn}, '
                                            f"but request is {req}", "pods", name)
                except QuantityError as e:
                    raise ApiError(422, "Invalid", f'pods "{name}" is invalid: {e}') from None


def check_quota(res: Resource, obj: dict[str, Any], quotas: list[dict[str, Any]],
                existing: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Raise 403 when `obj` would exceed a quota; return each quota's new `used` (by quota name)."""
    new_use = object_usage(res, obj)
    name = obj["metadata"].get("name", "")
    used_by_quota: dict[str, dict[str, str]] = {}
    for q in quotas:
        hard = (q.get("spec") or {}).get("hard") or {}
        tracked = {k: v for k, v in hard.items() if k in new_use or k.startswith(("requests.", "limits."))
                   or k in ("cpu", "memory")}
        if res.name != "pods" or res.group:
            tracked = {k: v for k, v in tracked.items() if k in new_use}
        if not tracked:
            continue
        totals: dict[str, Fraction] = {}
        for o in existing:
            for k, v in object_usage(res, o).items():
                totals[k] = totals.get(k, Fraction(0)) + v
        missing = [k for k in tracked if k not in new_use and res.name == "pods" and not res.group]
        if missing:
            raise forbidden(f'{res.name} "{name}" is forbidden: failed quota: {q["metadata"]["name"]}: '
                            f'must specify {",".join(sorted(missing))}', res.name, name)
        over = []
        for k, limit in tracked.items():
            try:
                lim = parse_quantity(limit)
            except QuantityError:
                continue
            if totals.get(k, Fraction(0)) + new_use.get(k, Fraction(0)) > lim:
                over.append(k)
        if over:
            def fmt(d: dict[str, Fraction], keys: list[str] = over) -> str:
                return ",".join(f"{k}={format_quantity(d.get(k, Fraction(0)))}" for k in sorted(keys))
            raise forbidden(f'{res.name} "{name}" is forbidden: exceeded quota: '
                            f'{q["metadata"]["name"]}, requested: '
                            f"{fmt(new_use)}, used: {fmt(totals)}, limited: "
                            f'{",".join(f"{k}={tracked[k]}" for k in sorted(over))}', res.name, name)
        used_by_quota[q["metadata"]["name"]] = {
            k: format_quantity(totals.get(k, Fraction(0)) + new_use.get(k, Fraction(0))) for k in tracked}
    return used_by_quota


def quota_used(quota: dict[str, Any],
               objects_by_resource: dict[Resource, list[dict[str, Any]]]) -> dict[str, str]:
    """status.used for one quota: what the namespace's objects charge against each of its hard limits."""
    hard = (quota.get("spec") or {}).get("hard") or {}
    totals: dict[str, Fraction] = {}
    for res, objs in objects_by_resource.items():
        for o in objs:
            for k, v in object_usage(res, o).items():
                totals[k] = totals.get(k, Fraction(0)) + v
    return {k: format_quantity(totals.get(k, Fraction(0))) for k in hard}
