"""Defaults Kubernetes fills in on create (and for pod templates inside workloads), applied in place."""

from __future__ import annotations

import base64
from typing import Any

from nodeagent.api import admission_policy, admission_webhooks, csi, storage
from nodeagent.api.env_validation import default_field_refs
from nodeagent.api.qos import compute_pod_qos

DEFAULT_TOLERATION_SECONDS = 300


def image_pull_policy(image: str) -> str:
    """Always for `:latest` or an untagged image, IfNotPresent for a tag or digest (Kubernetes' rule)."""
    if "@" in image:
        return "IfNotPresent"
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return "Always"
    return "Always" if last.rsplit(":", 1)[1] == "latest" else "IfNotPresent"


def _container(c: dict[str, Any]) -> None:
    if isinstance(c.get("image"), str):
        c.setdefault("imagePullPolicy", image_pull_policy(c["image"]))
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("resources", {})
    default_field_refs(c)
    for p in c.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
    res = c["resources"]
    if isinstance(res, dict) and res.get("limits") and not res.get("requests"):
        # requests default to limits (Kubernetes' defaulting for a container with limits only)
        res["requests"] = dict(res["limits"])
    elif isinstance(res, dict) and res.get("limits") and res.get("requests"):
        for k, v in res["limits"].items():
            res["requests"].setdefault(k, v)


def containers(cs: list[Any]) -> None:
    """Container defaults for a list of containers (the ephemeral ones a subresource write adds, too)."""
    for c in cs:
        if isinstance(c, dict):
            _container(c)


# Pod fields of features this cluster runs with their gates off (InPlacePodVerticalScaling,
# DynamicResourceAllocation, PodLevelResources): kube-apiserver drops them on write (dropDisabledPodFields),
# so a pod never carries a request nothing would honour.
_DISABLED_POD_FIELDS = ("resourceClaims", "resources")
_DISABLED_CONTAINER_FIELDS = ("resizePolicy",)


def drop_disabled_fields(spec: dict[str, Any]) -> None:
    for k in _DISABLED_POD_FIELDS:
        spec.pop(k, None)
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            if not isinstance(c, dict):
                continue
            for k in _DISABLED_CONTAINER_FIELDS:
                c.pop(k, None)
            if isinstance(c.get("resources"), dict):
                c["resources"].pop("claims", None)


def pod_spec(spec: dict[str, Any]) -> None:
    drop_disabled_fields(spec)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            if isinstance(c, dict):
                _container(c)
    for v in spec.get("volumes") or []:
        if not isinstance(v, dict):
            continue
        for src in ("configMap", "secret"):
            if isinstance(v.get(src), dict):
                v[src].setdefault("defaultMode", 420)
        image = v.get("image")
        if isinstance(image, dict) and isinstance(image.get("reference"), str):
            image.setdefault("pullPolicy", image_pull_policy(image["reference"]))
        if not any(k for k in v if k != "name"):
            v["emptyDir"] = {}


def pod(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    pod_spec(spec)
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tols = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tols):
            tols.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                         "tolerationSeconds": DEFAULT_TOLERATION_SECONDS})
    status = obj.setdefault("status", {})
    status.setdefault("phase", "Pending")
    status.setdefault("qosClass", compute_pod_qos(obj))


def _template(spec: dict[str, Any]) -> None:
    tpl = spec.get("template")
    if isinstance(tpl, dict):
        tpl.setdefault("metadata", {})
        pod_spec(tpl.setdefault("spec", {}))


def deployment(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    strat = spec.setdefault("strategy", {})
    strat.setdefault("type", "RollingUpdate")
    if strat["type"] == "RollingUpdate":
        ru = strat.setdefault("rollingUpdate", {})
        ru.setdefault("maxUnavailable", "25%")
        ru.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    _template(spec)


def replicaset(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    _template(spec)


def replicationcontroller(obj: dict[str, Any]) -> None:
    """SetDefaults_ReplicationController: selector and labels from the template's labels, one replica."""
    spec = obj.setdefault("spec", {})
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if labels:
        if not spec.get("selector"):
            spec["selector"] = dict(labels)
        if not (obj.get("metadata") or {}).get("labels"):
            obj.setdefault("metadata", {})["labels"] = dict(labels)
    spec.setdefault("replicas", 1)
    if spec.get("template") is not None:
        _template(spec)


def daemonset(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    us = spec.setdefault("updateStrategy", {})
    us.setdefault("type", "RollingUpdate")
    if us["type"] == "RollingUpdate":
        ru = us.setdefault("rollingUpdate", {})
        ru.setdefault("maxUnavailable", 1)
        ru.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    _template(spec)


def statefulset(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    us = spec.setdefault("updateStrategy", {})
    us.setdefault("type", "RollingUpdate")
    if us["type"] == "RollingUpdate":
        us.setdefault("rollingUpdate", {}).setdefault("partition", 0)
    spec.setdefault("revisionHistoryLimit", 10)
    policy = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
    policy.setdefault("whenDeleted", "Retain")
    policy.setdefault("whenScaled", "Retain")
    for t in spec.get("volumeClaimTemplates") or []:
        if isinstance(t, dict):
            t.setdefault("apiVersion", "v1")
            t.setdefault("kind", "PersistentVolumeClaim")
            t.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")
            t.setdefault("status", {"phase": "Pending"})
    _template(spec)


def job(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    if "completions" not in spec and "parallelism" not in spec:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    _template(spec)


def cronjob(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("concurrencyPolicy", "Allow")
    spec.setdefault("suspend", False)
    spec.setdefault("successfulJobsHistoryLimit", 3)
    spec.setdefault("failedJobsHistoryLimit", 1)
    jt = spec.setdefault("jobTemplate", {})
    _template(jt.setdefault("spec", {}))


def service(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    if spec["type"] in ("NodePort", "LoadBalancer"):
        spec.setdefault("externalTrafficPolicy", "Cluster")
    if spec["type"] == "LoadBalancer":
        spec.setdefault("allocateLoadBalancerNodePorts", True)
    for p in spec.get("ports") or []:
        if isinstance(p, dict):
            p.setdefault("protocol", "TCP")
            if p.get("nodePort", 1) in (0, None):
                del p["nodePort"]  # an int32 with omitempty: 0 (or null) is "unset", as Go decodes it
            if "port" in p:
                p.setdefault("targetPort", p["port"])
    obj.setdefault("status", {}).setdefault("loadBalancer", {})
    service_status(obj)


def service_status(obj: dict[str, Any]) -> None:
    """status.loadBalancer.ingress[].ipMode: VIP for an entry with an ip (LoadBalancerIPMode, GA in 1.32):
    kube-proxy then programs the address; `Proxy` tells it the load balancer sends traffic on by itself."""
    lb = (obj.get("status") or {}).get("loadBalancer") or {}
    for ing in lb.get("ingress") or []:
        if isinstance(ing, dict) and ing.get("ip") and not ing.get("ipMode"):
            ing["ipMode"] = "VIP"


def service_type_change(new: dict[str, Any], old: dict[str, Any]) -> None:
    """kube-apiserver's dropTypeDependentFields: leaving LoadBalancer (or Local policy) drops the fields
    that only meant something there, when the update left them as they were."""
    spec, ospec = new.setdefault("spec", {}), old.get("spec") or {}
    if spec.get("type") == "LoadBalancer":
        return
    for f in ("allocateLoadBalancerNodePorts", "loadBalancerClass", "healthCheckNodePort"):
        if f in spec and spec.get(f) == ospec.get(f):
            del spec[f]
    if spec.get("type") in ("ClusterIP", "ExternalName"):
        # nodePorts the update carried over unchanged go with the type that needed them
        old_np = {(p.get("port"), p.get("protocol", "TCP")): p.get("nodePort")
                  for p in ospec.get("ports") or [] if isinstance(p, dict)}
        for p in spec.get("ports") or []:
            if isinstance(p, dict) and p.get("nodePort") is not None and \
                    p.get("nodePort") == old_np.get((p.get("port"), p.get("protocol", "TCP"))):
                del p["nodePort"]
    if spec.get("type") in ("ClusterIP", "ExternalName") \
            and ospec.get("type") in ("NodePort", "LoadBalancer") \
            and spec.get("externalTrafficPolicy") == ospec.get("externalTrafficPolicy"):
        spec.pop("externalTrafficPolicy", None)


def horizontalpodautoscaler(obj: dict[str, Any]) -> None:
    """autoscaling/v2 SetDefaults_HorizontalPodAutoscaler: one replica at least, CPU at 80% if no metric."""
    spec = obj.setdefault("spec", {})
    if spec.get("minReplicas") is None:
        spec["minReplicas"] = 1
    if not spec.get("metrics"):
        spec["metrics"] = [{"type": "Resource", "resource": {
            "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
    # status.desiredReplicas is a plain int32 (no omitempty): kube-apiserver always writes it, and
    # clients (the Python client's models) require it
    status = obj.setdefault("status", {})
    if status.get("desiredReplicas") is None:
        status["desiredReplicas"] = 0


def namespace(obj: dict[str, Any]) -> None:
    name = (obj.get("metadata") or {}).get("name")
    if name:
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
    obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    obj.setdefault("status", {}).setdefault("phase", "Active")


def secret(obj: dict[str, Any]) -> None:
    obj.setdefault("type", "Opaque")
    sd = obj.pop("stringData", None)
    if isinstance(sd, dict):
        data = obj.setdefault("data", {})
        for k, v in sd.items():
            data[k] = base64.b64encode(str(v).encode()).decode()


def node(obj: dict[str, Any]) -> None:
    obj.setdefault("spec", {})
    obj.setdefault("status", {})


def priorityclass(obj: dict[str, Any]) -> None:
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")


def networkpolicy(obj: dict[str, Any]) -> None:
    """policyTypes: Ingress always, plus Egress when egress rules exist; port protocols default to TCP."""
    spec = obj.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("podSelector", {})
        if not spec.get("policyTypes"):
            spec["policyTypes"] = ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]
        for field in ("ingress", "egress"):
            for rule in spec.get(field) or []:
                for p in (rule or {}).get("ports") or []:
                    if isinstance(p, dict):
                        p.setdefault("protocol", "TCP")


BY_KIND = {
    "Pod": pod, "Deployment": deployment, "ReplicaSet": replicaset, "DaemonSet": daemonset,
    "ReplicationController": replicationcontroller, "HorizontalPodAutoscaler": horizontalpodautoscaler,
    "StatefulSet": statefulset, "Job": job, "CronJob": cronjob, "Service": service, "Namespace": namespace,
    "Secret": secret, "Node": node, "PriorityClass": priorityclass, "NetworkPolicy": networkpolicy,
    "PersistentVolume": storage.default_pv, "PersistentVolumeClaim": storage.default_pvc,
    "StorageClass": storage.default_sc, "CSIDriver": csi.default_csidriver,
    admission_webhooks.MUTATING: admission_webhooks.default_configuration,
    admission_webhooks.VALIDATING: admission_webhooks.default_configuration,
    admission_policy.POLICY: admission_policy.default_policy,
    admission_policy.BINDING: admission_policy.default_binding,
}


def apply_defaults(obj: dict[str, Any], kind: str) -> None:
    fn = BY_KIND.get(kind)
    if fn is not None:
        fn(obj)
