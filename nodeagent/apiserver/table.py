"""meta.k8s.io/v1 Table output: the columns `kubectl get` prints for each kind, computed server-side."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from nodeagent.api.times import parse_time

Col = tuple[str, str, int]  # name, type, priority (1 = only with -o wide)


def human_duration(seconds: float) -> str:
    """kubectl's HumanDuration: 45s, 5m3s, 3h4m, 2d5h, 400d, 3y12d."""
    s = int(seconds)
    if s < 0:
        return "<invalid>"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{h // 24}d{h % 24}h" if h % 24 else f"{h // 24}d"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    if h < 24 * 365 * 8:
        y = h // 24 // 365
        return f"{y}y{(h // 24) % 365}d"
    return f"{h // 24 // 365}y"


def age(obj: dict[str, Any], now: dt.datetime) -> str:
    t = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    return human_duration((now - t).total_seconds()) if t else "<unknown>"


def _since(ts: str | None, now: dt.datetime) -> str:
    t = parse_time(ts)
    return human_duration((now - t).total_seconds()) if t else "<none>"


def _labels_str(d: dict[str, str] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted((d or {}).items())) or "<none>"


def _selector_str(sel: dict[str, Any] | None) -> str:
    if not sel:
        return "<none>"
    parts = [f"{k}={v}" for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for e in sel.get("matchExpressions") or []:
        op = e.get("operator")
        if op in ("In", "NotIn"):
            parts.append(f"{e['key']} {op.lower()} ({','.join(e.get('values') or [])})")
        elif op == "Exists":
            parts.append(e["key"])
        else:
            parts.append(f"!{e['key']}")
    return ",".join(parts) or "<none>"


def _containers(spec: dict[str, Any]) -> tuple[str, str]:
    cs = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return ",".join(c.get("name", "") for c in cs), ",".join(c.get("image", "") for c in cs)


# ------------------------------------------------------------------ per kind
def pod_status_reason(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Pending"
    inits = status.get("initContainerStatuses") or []
    n_init = len((pod.get("spec") or {}).get("initContainers") or [])
    initializing = False
    for i, c in enumerate(inits):
        st = c.get("state") or {}
        term = st.get("terminated")
        if term and term.get("exitCode") == 0:
            continue
        initializing = True
        if term:
            reason = "Init:" + (term.get("reason") or (f"Signal:{term['signal']}" if term.get("signal")
                                                     else f"ExitCode:{term.get('exitCode')}"))
        elif st.get("waiting", {}).get("reason") and st["waiting"]["reason"] != "PodInitializing":
            reason = "Init:" + st["waiting"]["reason"]
        else:
            reason = f"Init:{i}/{n_init}"
        break
    if not initializing:
        has_running = False
        for c in reversed(status.get("containerStatuses") or []):
            st = c.get("state") or {}
            if st.get("waiting", {}).get("reason"):
                reason = st["waiting"]["reason"]
            elif st.get("terminated"):
                t = st["terminated"]
                reason = t.get("reason") or (f"Signal:{t['signal']}"
                                             if t.get("signal") else f"ExitCode:{t.get('exitCode')}")
            elif st.get("running") and c.get("ready"):
                has_running = True
        if reason == "Completed" and has_running:
            reason = "Running"
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


def _pod(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    cs = status.get("containerStatuses") or []
    ready = sum(1 for c in cs if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in cs)
    gates = spec.get("readinessGates") or []
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    passed = sum(1 for g in gates if conds.get(g.get("conditionType")) == "True")
    gate_str = f"{passed}/{len(gates)}" if gates else "<none>"
    return [o["metadata"]["name"], f"{ready}/{len(spec.get('containers') or [])}", pod_status_reason(o),
            str(restarts), age(o, now), status.get("podIP") or "<none>", spec.get("nodeName") or "<none>",
            status.get("nominatedNodeName") or "<none>", gate_str]


def _node(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    status = o.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    st = ["Ready" if ready and ready.get("status") == "True" else "NotReady" if ready else "Unknown"]
    if (o.get("spec") or {}).get("unschedulable"):
        st.append("SchedulingDisabled")
    labels = (o.get("metadata") or {}).get("labels") or {}
    roles = sorted({k.split("/", 1)[1] for k in labels
                    if k.startswith("node-role.kubernetes.io/") and "/" in k}
                   | ({labels["kubernetes.io/role"]} if labels.get("kubernetes.io/role") else set()))
    info = status.get("nodeInfo") or {}
    addrs = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    return [o["metadata"]["name"], ",".join(st), ",".join(roles) or "<none>", age(o, now),
            info.get("kubeletVersion", ""), addrs.get("InternalIP", "<none>"),
            addrs.get("ExternalIP", "<none>"), info.get("osImage", "<unknown>"),
            info.get("kernelVersion", "<unknown>"), info.get("containerRuntimeVersion", "<unknown>")]


def _service(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    spec = o.get("spec") or {}
    typ = spec.get("type", "ClusterIP")
    ext = spec.get("externalIPs") or []
    lb = [i.get("ip") or i.get("hostname")
          for i in ((o.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []]
    if typ == "ExternalName":
        ext_s = spec.get("externalName", "<none>")
    elif typ == "LoadBalancer":
        ext_s = ",".join(lb + ext) or "<pending>"
    else:
        ext_s = ",".join(ext) or "<none>"
    ports = []
    for p in spec.get("ports") or []:
        s = f"{p.get('port')}"
        if p.get("nodePort"):
            s += f":{p['nodePort']}"
        ports.append(f"{s}/{p.get('protocol', 'TCP')}")
    return [o["metadata"]["name"], typ, spec.get("clusterIP") or "<none>", ext_s, ",".join(ports) or "<none>",
            age(o, now), _labels_str(spec.get("selector"))]


def _deployment(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    c, i = _containers(spec)
    return [o["metadata"]["name"], f"{st.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
            st.get("updatedReplicas", 0), st.get("availableReplicas", 0), age(o, now), c, i,
            _selector_str(spec.get("selector"))]


def _replicaset(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    c, i = _containers(spec)
    return [o["metadata"]["name"], spec.get("replicas", 0), st.get("replicas", 0), st.get("readyReplicas", 0),
            age(o, now), c, i, _selector_str(spec.get("selector"))]


def _replicationcontroller(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    """As a ReplicaSet's row; the selector is a plain label map (printReplicationController)."""
    sel = (o.get("spec") or {}).get("selector") or {}
    row = _replicaset(o, now)
    row[-1] = ",".join(f"{k}={v}" for k, v in sorted(sel.items())) or "<none>"
    return row


def _daemonset(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    c, i = _containers(spec)
    ns = ((spec.get("template") or {}).get("spec") or {}).get("nodeSelector")
    return [o["metadata"]["name"], st.get("desiredNumberScheduled", 0), st.get("currentNumberScheduled", 0),
            st.get("numberReady", 0), st.get("updatedNumberScheduled", 0), st.get("numberAvailable", 0),
            _labels_str(ns), age(o, now), c, i, _selector_str(spec.get("selector"))]


def _statefulset(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    c, i = _containers(spec)
    return [o["metadata"]["name"], f"{st.get('readyReplicas', 0)}/{spec.get('replicas', 0)}",
            age(o, now), c, i]


def _job(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    c, i = _containers(spec)
    comp = spec.get("completions")
    completions = (f"{st.get('succeeded', 0)}/{comp}" if comp is not None
                   else f"{st.get('succeeded', 0)}/1 of {spec.get('parallelism', 1)}")
    conds = {x.get("type"): x.get("status") for x in st.get("conditions") or []}
    status = ("Complete" if conds.get("Complete") == "True" else "Failed" if conds.get("Failed") == "True"
              else "Suspended" if spec.get("suspend") else "Running")
    start, end = parse_time(st.get("startTime")), parse_time(st.get("completionTime"))
    dur = human_duration(((end or now) - start).total_seconds()) if start else ""
    return [o["metadata"]["name"], status, completions, dur, age(o, now), c, i,
            _selector_str(spec.get("selector"))]


def _cronjob(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    return [o["metadata"]["name"], spec.get("schedule", ""), spec.get("timeZone") or "<none>",
            str(bool(spec.get("suspend"))), len(st.get("active") or []),
            _since(st.get("lastScheduleTime"), now), age(o, now)]


def _event(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    inv = o.get("involvedObject") or o.get("regarding") or {}
    last = o.get("lastTimestamp") or o.get("eventTime") or (o.get("metadata") or {}).get("creationTimestamp")
    return [_since(last, now), o.get("type", ""), o.get("reason", ""),
            f"{(inv.get('kind') or '').lower()}/{inv.get('name', '')}", o.get("message") or o.get("note", "")]


def _endpoints(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    eps = []
    for s in o.get("subsets") or []:
        ports = s.get("ports") or [{}]
        for a in s.get("addresses") or []:
            for p in ports:
                eps.append(f"{a.get('ip')}:{p['port']}" if p.get("port") else a.get("ip", ""))
    shown = ",".join(eps[:3]) + (f" + {len(eps) - 3} more..." if len(eps) > 3 else "")
    return [o["metadata"]["name"], shown or "<none>", age(o, now)]


def _endpointslice(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    ports = ",".join(str(p.get("port")) for p in o.get("ports") or []) or "<unset>"
    addrs = [a for e in o.get("endpoints") or [] for a in e.get("addresses") or []]
    shown = ",".join(addrs[:3]) + (f" + {len(addrs) - 3} more..." if len(addrs) > 3 else "")
    return [o["metadata"]["name"], o.get("addressType", ""), ports, shown or "<unset>", age(o, now)]


TABLES: dict[str, tuple[list[Col], Callable[[dict[str, Any], dt.datetime], list[Any]]]] = {
    "Pod": ([("Name", "string", 0), ("Ready", "string", 0), ("Status", "string", 0),
             ("Restarts", "string", 0), ("Age", "string", 0), ("IP", "string", 1), ("Node", "string", 1),
             ("Nominated Node", "string", 1), ("Readiness Gates", "string", 1)], _pod),
    "Node": ([("Name", "string", 0), ("Status", "string", 0), ("Roles", "string", 0), ("Age", "string", 0),
              ("Version", "string", 0), ("Internal-IP", "string", 1), ("External-IP", "string", 1),
              ("OS-Image", "string", 1), ("Kernel-Version", "string", 1), ("Container-Runtime", "string", 1)],
             _node),
    "Namespace": ([("Name", "string", 0), ("Status", "string", 0), ("Age", "string", 0)],
                  lambda o, now: [o["metadata"]["name"],
                                  (o.get("status") or {}).get("phase", ""), age(o, now)]),
    "Service": ([("Name", "string", 0), ("Type", "string", 0), ("Cluster-IP", "string", 0),
                 ("External-IP", "string", 0), ("Port(s)", "string", 0), ("Age", "string", 0),
                 ("Selector", "string", 1)], _service),
    "Deployment": ([("Name", "string", 0), ("Ready", "string", 0), ("Up-to-date", "integer", 0),
                    ("Available", "integer", 0), ("Age", "string", 0), ("Containers", "string", 1),
                    ("Images", "string", 1), ("Selector", "string", 1)], _deployment),
    "ReplicaSet": ([("Name", "string", 0), ("Desired", "integer", 0), ("Current", "integer", 0),
                    ("Ready", "integer", 0), ("Age", "string", 0), ("Containers", "string", 1),
                    ("Images", "string", 1), ("Selector", "string", 1)], _replicaset),
    "ReplicationController": ([("Name", "string", 0), ("Desired", "integer", 0), ("Current", "integer", 0),
                               ("Ready", "integer", 0), ("Age", "string", 0), ("Containers", "string", 1),
                               ("Images", "string", 1), ("Selector", "string", 1)], _replicationcontroller),
    "DaemonSet": ([("Name", "string", 0), ("Desired", "integer", 0), ("Current", "integer", 0),
                   ("Ready", "integer", 0), ("Up-to-date", "integer", 0), ("Available", "integer", 0),
                   ("Node Selector", "string", 0), ("Age", "string", 0), ("Containers", "string", 1),
                   ("Images", "string", 1), ("Selector", "string", 1)], _daemonset),
    "StatefulSet": ([("Name", "string", 0), ("Ready", "string", 0), ("Age", "string", 0),
                     ("Containers", "string", 1), ("Images", "string", 1)], _statefulset),
    "Job": ([("Name", "string", 0), ("Status", "string", 0), ("Completions", "string", 0),
             ("Duration", "string", 0), ("Age", "string", 0), ("Containers", "string", 1),
             ("Images", "string", 1), ("Selector", "string", 1)], _job),
    "CronJob": ([("Name", "string", 0), ("Schedule", "string", 0), ("Timezone", "string", 0),
                 ("Suspend", "boolean", 0), ("Active", "integer", 0), ("Last Schedule", "string", 0),
                 ("Age", "string", 0)], _cronjob),
    "ConfigMap": ([("Name", "string", 0), ("Data", "string", 0), ("Age", "string", 0)],
                  lambda o, now: [o["metadata"]["name"],
                                  len(o.get("data") or {}) + len(o.get("binaryData") or {}), age(o, now)]),
    "Secret": ([("Name", "string", 0), ("Type", "string", 0), ("Data", "string", 0), ("Age", "string", 0)],
               lambda o, now: [o["metadata"]["name"], o.get("type", "Opaque"),
                               len(o.get("data") or {}), age(o, now)]),
    "ServiceAccount": ([("Name", "string", 0), ("Secrets", "string", 0), ("Age", "string", 0)],
                       lambda o, now: [o["metadata"]["name"], len(o.get("secrets") or []), age(o, now)]),
    "Endpoints": ([("Name", "string", 0), ("Endpoints", "string", 0), ("Age", "string", 0)], _endpoints),
    "EndpointSlice": ([("Name", "string", 0), ("AddressType", "string", 0), ("Ports", "string", 0),
                       ("Endpoints", "string", 0), ("Age", "string", 0)], _endpointslice),
    "Event": ([("Last Seen", "string", 0), ("Type", "string", 0), ("Reason", "string", 0),
               ("Object", "string", 0), ("Message", "string", 0)], _event),
    "Lease": ([("Name", "string", 0), ("Holder", "string", 0), ("Age", "string", 0)],
              lambda o, now: [o["metadata"]["name"],
                              (o.get("spec") or {}).get("holderIdentity", ""), age(o, now)]),
    "PriorityClass": ([("Name", "string", 0), ("Value", "integer", 0), ("Global-Default", "boolean", 0),
                       ("Age", "string", 0), ("PreemptionPolicy", "string", 1)],
                      lambda o, now: [o["metadata"]["name"], o.get("value", 0), bool(o.get("globalDefault")),
                                      age(o, now), o.get("preemptionPolicy", "")]),
    "PodDisruptionBudget": ([("Name", "string", 0), ("Min Available", "string", 0),
                             ("Max Unavailable", "string", 0), ("Allowed Disruptions", "integer", 0),
                             ("Age", "string", 0)],
                            lambda o, now: [o["metadata"]["name"],
                                            str((o.get("spec") or {}).get("minAvailable", "N/A")),
                                            str((o.get("spec") or {}).get("maxUnavailable", "N/A")),
                                            (o.get("status") or {}).get("disruptionsAllowed", 0),
                                            age(o, now)]),
    "NetworkPolicy": ([("Name", "string", 0), ("Pod-Selector", "string", 0), ("Age", "string", 0)],
                      lambda o, now: [o["metadata"]["name"],
                                      _selector_str((o.get("spec") or {}).get("podSelector"))
                                      .replace("<none>", "<none>"), age(o, now)]),
}

def _ingress(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    spec = o.get("spec") or {}
    hosts = ",".join(r.get("host", "") for r in spec.get("rules") or [] if r.get("host")) or "*"
    lb = [i.get("ip") or i.get("hostname")
          for i in ((o.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []]
    ports = "80, 443" if spec.get("tls") else "80"
    return [o["metadata"]["name"], spec.get("ingressClassName") or "<none>", hosts, ",".join(lb),
            ports, age(o, now)]


TABLES["Ingress"] = ([("Name", "string", 0), ("Class", "string", 0), ("Hosts", "string", 0),
                      ("Address", "string", 0), ("Ports", "string", 0), ("Age", "string", 0)], _ingress)
_MODES = {"ReadWriteOnce": "RWO", "ReadOnlyMany": "ROX", "ReadWriteMany": "RWX", "ReadWriteOncePod": "RWOP"}


def _modes(modes: Any) -> str:
    return ",".join(_MODES.get(m, m) for m in modes or [])


def _storage_class(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    ann = o["metadata"].get("annotations") or {}
    default = "true" in (ann.get("storageclass.kubernetes.io/is-default-class"),
                         ann.get("storageclass.beta.kubernetes.io/is-default-class"))
    return [o["metadata"]["name"] + (" (default)" if default else ""), o.get("provisioner", ""),
            o.get("reclaimPolicy", "Delete"), o.get("volumeBindingMode", "Immediate"),
            str(bool(o.get("allowVolumeExpansion"))).lower(), age(o, now)]


def _pvc(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    phase = "Terminating" if o["metadata"].get("deletionTimestamp") else st.get("phase", "")
    return [o["metadata"]["name"], phase, spec.get("volumeName", ""),
            (st.get("capacity") or {}).get("storage", ""), _modes(st.get("accessModes")),
            spec.get("storageClassName") or "", spec.get("volumeAttributesClassName") or "<unset>",
            age(o, now), spec.get("volumeMode") or "Filesystem"]


def _pv(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    ref = spec.get("claimRef") or {}
    phase = "Terminating" if o["metadata"].get("deletionTimestamp") else st.get("phase", "")
    return [o["metadata"]["name"], (spec.get("capacity") or {}).get("storage", ""),
            _modes(spec.get("accessModes")), spec.get("persistentVolumeReclaimPolicy", ""), phase,
            f"{ref.get('namespace')}/{ref.get('name')}" if ref else "", spec.get("storageClassName") or "",
            spec.get("volumeAttributesClassName") or "<unset>", st.get("reason", ""), age(o, now),
            spec.get("volumeMode") or "Filesystem"]


TABLES["StorageClass"] = ([("Name", "string", 0), ("Provisioner", "string", 0),
                           ("ReclaimPolicy", "string", 0), ("VolumeBindingMode", "string", 0),
                           ("AllowVolumeExpansion", "string", 0), ("Age", "string", 0)], _storage_class)
TABLES["PersistentVolumeClaim"] = ([("Name", "string", 0), ("Status", "string", 0), ("Volume", "string", 0),
                                    ("Capacity", "string", 0), ("Access Modes", "string", 0),
                                    ("StorageClass", "string", 0), ("VolumeAttributesClass", "string", 0),
                                    ("Age", "string", 0), ("VolumeMode", "string", 1)], _pvc)
TABLES["PersistentVolume"] = ([("Name", "string", 0), ("Capacity", "string", 0),
                               ("Access Modes", "string", 0), ("Reclaim Policy", "string", 0),
                               ("Status", "string", 0), ("Claim", "string", 0), ("StorageClass", "string", 0),
                               ("VolumeAttributesClass", "string", 0), ("Reason", "string", 0),
                               ("Age", "string", 0), ("VolumeMode", "string", 1)], _pv)

def _hpa_target(spec: dict[str, Any], status: dict[str, Any] | None) -> str:
    """One metric of kubectl's TARGETS column (printers.go formatHPAMetrics): "cpu: 37%/50%"."""
    kind = spec.get("type")
    if kind in ("Resource", "ContainerResource"):
        field = "resource" if kind == "Resource" else "containerResource"
        src, cur = spec.get(field) or {}, ((status or {}).get(field) or {}).get("current") or {}
        target = src.get("target") or {}
        name = src.get("name", "")
        if target.get("averageValue") is not None:
            return f"{name}: {cur.get('averageValue', '<unknown>')}/{target['averageValue']}"
        now, want = cur.get("averageUtilization"), target.get("averageUtilization")
        shown_now = "<unknown>" if now is None else f"{now}%"
        return f"{name}: {shown_now}/{'<auto>' if want is None else f'{want}%'}"
    if kind in ("Pods", "Object", "External"):
        field = kind.lower()
        target = (spec.get(field) or {}).get("target") or {}
        cur = ((status or {}).get(field) or {}).get("current") or {}
        if kind == "Pods":
            return f"{cur.get('averageValue', '<unknown>')}/{target.get('averageValue', '')}"
        if target.get("averageValue") is not None:
            return f"{cur.get('averageValue', '<unknown>')}/{target['averageValue']} (avg)"
        return f"{cur.get('value', '<unknown>')}/{target.get('value', '')}"
    return "<unknown type>"


def _hpa(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    spec, st = o.get("spec") or {}, o.get("status") or {}
    metrics, current = spec.get("metrics") or [], st.get("currentMetrics") or []
    shown = [_hpa_target(m, current[i] if i < len(current) else None) for i, m in enumerate(metrics)]
    if "targetCPUUtilizationPercentage" in spec:  # autoscaling/v1's one CPU target
        cur = st.get("currentCPUUtilizationPercentage")
        current_text = "<unknown>" if cur is None else f"{cur}%"
        shown = [f"cpu: {current_text}/{spec['targetCPUUtilizationPercentage']}%"]
    targets = ", ".join(shown[:2]) + (f" + {len(shown) - 2} more..." if len(shown) > 2 else "")
    ref = spec.get("scaleTargetRef") or {}
    min_pods = spec.get("minReplicas")
    return [o["metadata"]["name"], f"{ref.get('kind', '')}/{ref.get('name', '')}", targets or "<none>",
            "<unset>" if min_pods is None else str(min_pods), spec.get("maxReplicas", 0),
            st.get("currentReplicas", 0), age(o, now)]


def _apiservice(o: dict[str, Any], now: dt.datetime) -> list[Any]:
    svc = (o.get("spec") or {}).get("service")
    conds = (o.get("status") or {}).get("conditions") or []
    avail = next((c for c in conds if c.get("type") == "Available"), None)
    shown = "Unknown" if avail is None else avail.get("status", "Unknown")
    if avail is not None and shown != "True":
        shown = f"{shown} ({avail.get('reason', '')})"
    return [o["metadata"]["name"], f"{svc.get('namespace')}/{svc.get('name')}" if svc else "Local", shown,
            age(o, now)]


def _usage_cells(o: dict[str, Any]) -> list[Any]:
    usage = o.get("usage") or {}
    if "containers" in o:  # a pod's: its containers' sum, as the metrics printer shows it
        from nodeagent.api.quantity import format_quantity, parse_quantity

        cpu = sum((parse_quantity((c.get("usage") or {}).get("cpu", "0")) for c in o["containers"]),
                  start=parse_quantity(0))
        mem = sum((parse_quantity((c.get("usage") or {}).get("memory", "0")) for c in o["containers"]),
                  start=parse_quantity(0))
        usage = {"cpu": format_quantity(cpu), "memory": format_quantity(mem, binary=True)}
    return [usage.get("cpu", ""), usage.get("memory", ""), o.get("window", "")]


TABLES["HorizontalPodAutoscaler"] = ([("Name", "string", 0), ("Reference", "string", 0),
                                      ("Targets", "string", 0), ("MinPods", "string", 0),
                                      ("MaxPods", "integer", 0), ("Replicas", "integer", 0),
                                      ("Age", "string", 0)], _hpa)
TABLES["APIService"] = ([("Name", "string", 0), ("Service", "string", 0), ("Available", "string", 0),
                         ("Age", "string", 0)], _apiservice)
for _kind in ("NodeMetrics", "PodMetrics"):
    TABLES[_kind] = ([("Name", "string", 0), ("CPU", "string", 0), ("Memory", "string", 0),
                      ("Window", "string", 0)], lambda o, now: [o["metadata"]["name"], *_usage_cells(o)])

_DEFAULT: tuple[list[Col], Callable[[dict[str, Any], dt.datetime], list[Any]]] = (
    [("Name", "string", 0), ("Created At", "date", 0)],
    lambda o, now: [o["metadata"]["name"], (o.get("metadata") or {}).get("creationTimestamp", "")],
)


def columns(kind: str) -> list[dict[str, Any]]:
    cols, _ = TABLES.get(kind, _DEFAULT)
    out = []
    for name, typ, prio in cols:
        d: dict[str, Any] = {"name": name, "type": typ, "format": "", "description": name, "priority": prio}
        if name == "Name":
            d["format"] = "name"
            d["description"] = "Name must be unique within a namespace."
        out.append(d)
    return out


def _partial(obj: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": obj.get("metadata") or {}}


def rows(kind: str, objs: list[dict[str, Any]], include: str = "Metadata") -> list[dict[str, Any]]:
    _, fn = TABLES.get(kind, _DEFAULT)
    now = dt.datetime.now(dt.UTC)
    out = []
    for o in objs:
        row: dict[str, Any] = {"cells": fn(o, now)}
        if include == "Object":
            row["object"] = o
        elif include != "None":
            row["object"] = _partial(o)
        out.append(row)
    return out


def table(kind: str, objs: list[dict[str, Any]], resource_version: str, include: str = "Metadata",
          cont: str | None = None, with_columns: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if cont:
        meta["continue"] = cont
    out: dict[str, Any] = {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
    if with_columns:
        out["columnDefinitions"] = columns(kind)
    out["rows"] = rows(kind, objs, include)
    return out
