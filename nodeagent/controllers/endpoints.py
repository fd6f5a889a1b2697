"""The Endpoints / EndpointSlice controller's pure core: a Service's selector + pods → endpoints.

No I/O: the reconcile loop (later, with the controller manager) lists pods and
writes what these functions return. Semantics follow Kubernetes' controllers:

- only pods in the Service's namespace whose labels match a non-empty selector;
- pods without an IP, or Succeeded/Failed, are left out;
- ready = the pod's Ready condition is True and it is not terminating
  (publishNotReadyAddresses makes every pod ready);
- v1 Endpoints leave terminating pods out and list unready ones under
  notReadyAddresses; EndpointSlices keep terminating pods with
  ready=false, serving=<Ready>, terminating=true;
- a named targetPort is resolved against each pod's container ports (same
  protocol); a pod lacking it is not an endpoint for that port;
- headless Services (clusterIP None) get endpoints like any other; a Service
  without ports gets address-only endpoints.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

Obj = Mapping[str, Any]
MANAGED_BY = "endpointslice-controller.k8s.io"
MAX_ENDPOINTS_PER_SLICE = 100


def selects(service: Obj, pod: Obj) -> bool:
    sel = (service.get("spec") or {}).get("selector") or {}
    if not sel:
        return False
    if (pod.get("metadata") or {}).get("namespace", "default") != (service.get("metadata") or {}).get(
            "namespace", "default"):
        return False
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in sel.items())


def _pod_ready(pod: Obj) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def pod_state(service: Obj, pod: Obj) -> tuple[bool, bool, bool] | None:
    """(ready, serving, terminating) of a pod as an endpoint, or None if it cannot be one."""
    status = pod.get("status") or {}
    if not status.get("podIP") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    terminating = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    serving = _pod_ready(pod)
    if (service.get("spec") or {}).get("publishNotReadyAddresses"):
        serving = True
    return (serving and not terminating, serving, terminating)


def resolve_target_port(port: Obj, pod: Obj) -> int | None:
    """A Service port's targetPort for one pod: a number as is, a name via the containers' ports."""
    target = port.get("targetPort", port.get("port"))
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    proto = port.get("protocol") or "TCP"
    for c in (pod.get("spec") or {}).get("containers") or []:
        for cp in c.get("ports") or []:
            if cp.get("name") == target and (cp.get("protocol") or "TCP") == proto:
                return int(cp["containerPort"])
    return None


def _pod_ports(service: Obj, pod: Obj) -> tuple[tuple[str, int, str], ...]:
    """This pod's resolved (name, port, protocol) for each Service port it can serve."""
    out = []
    for p in (service.get("spec") or {}).get("ports") or []:
        number = resolve_target_port(p, pod)
        if number is not None:
            out.append((p.get("name") or "", number, p.get("protocol") or "TCP"))
    return tuple(out)


def _target_ref(pod: Obj) -> dict:
    meta = pod.get("metadata") or {}
    ref = {"kind": "Pod", "namespace": meta.get("namespace", "default"), "name": meta.get("name")}
    if meta.get("uid"):
        ref["uid"] = meta["uid"]
    return ref


def _candidates(service: Obj, pods: Iterable[Obj]) -> list[tuple[Obj, tuple[bool, bool, bool], tuple]]:
    out = []
    has_ports = bool((service.get("spec") or {}).get("ports"))
    for pod in pods:
        if not selects(service, pod):
            continue
        state = pod_state(service, pod)
        if state is None:
            continue
        ports = _pod_ports(service, pod)
        if has_ports and not ports:
            continue
        out.append((pod, state, ports))
    out.sort(key=lambda t: ((t[0].get("status") or {}).get("podIP"),
                            (t[0].get("metadata") or {}).get("name")))
    return out


def compute_endpoints(service: Obj, pods: Iterable[Obj]) -> dict | None:
    """The v1 Endpoints object for `service` (None: selector-less Services are not managed)."""
    if not (service.get("spec") or {}).get("selector"):
        return None
    meta = service.get("metadata") or {}
    groups: dict[tuple, dict[str, list]] = {}
    for pod, (ready, _serving, terminating), ports in _candidates(service, pods):
        if terminating:
            continue
        addr = {"ip": pod["status"]["podIP"], "targetRef": _target_ref(pod)}
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            addr["nodeName"] = node
        g = groups.setdefault(ports, {"addresses": [], "notReadyAddresses": []})
        g["addresses" if ready else "notReadyAddresses"].append(addr)
    subsets = []
    for ports, g in groups.items():
        subset: dict[str, Any] = {k: v for k, v in g.items() if v}
        if ports:
            subset["ports"] = [{**({"name": n} if n else {}), "port": p, "protocol": proto}
                               for n, p, proto in ports]
        subsets.append(subset)
    labels = dict(meta.get("labels") or {})
    if (service.get("spec") or {}).get("clusterIP") == "None":
        labels["service.kubernetes.io/headless"] = ""
    return {"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace", "default"),
                         **({"labels": labels} if labels else {})},
            "subsets": subsets}


def compute_endpoint_slices(service: Obj, pods: Iterable[Obj],
                            max_per_slice: int = MAX_ENDPOINTS_PER_SLICE) -> list[dict] | None:
    """discovery.k8s.io/v1 EndpointSlices for `service`: one set per distinct port mapping, chunked."""
    spec = service.get("spec") or {}
    if not spec.get("selector"):
        return None
    meta = service.get("metadata") or {}
    name, ns = meta.get("name"), meta.get("namespace", "default")
    groups: dict[tuple, list[dict]] = {}
    for pod, (ready, serving, terminating), ports in _candidates(service, pods):
        ep: dict[str, Any] = {
            "addresses": [pod["status"]["podIP"]],
            "conditions": {"ready": ready, "serving": serving, "terminating": terminating},
            "targetRef": _target_ref(pod),
        }
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            ep["nodeName"] = node
        groups.setdefault(ports, []).append(ep)
    if not groups:
        groups[()] = []  # the placeholder slice: no endpoints, no ports
    labels = {"kubernetes.io/service-name": name, "endpointslice.kubernetes.io/managed-by": MANAGED_BY}
    if spec.get("clusterIP") == "None":
        labels["service.kubernetes.io/headless"] = ""
    slices = []
    for ports, eps in sorted(groups.items(), key=lambda kv: repr(kv[0])):
        digest = hashlib.sha256(repr(ports).encode()).hexdigest()[:5]
        chunks = [eps[i:i + max_per_slice] for i in range(0, len(eps), max_per_slice)] or [[]]
        for i, chunk in enumerate(chunks):
            slices.append({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
                "metadata": {"name": f"{name}-{digest}{i if i else ''}"[:63], "namespace": ns,
                             "labels": labels,
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": name,
                                                  **({"uid": meta["uid"]} if meta.get("uid") else {}),
                                                  "controller": True, "blockOwnerDeletion": True}]},
                "endpoints": chunk,
                "ports": [{"name": n, "port": p, "protocol": proto} for n, p, proto in ports],
            })
    return slices
