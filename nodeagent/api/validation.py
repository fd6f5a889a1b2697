"""Validation of object metadata and the specs kubectl users most often get wrong, as Kubernetes words it.

Each check returns field errors `{"reason", "message", "field"}`; the apiserver turns a non-empty
list into a 422 Invalid Status with these as `details.causes`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from nodeagent.api import csi, storage
from nodeagent.api.cidrs import subnet_of
from nodeagent.api.names import dns1123_label, dns1123_subdomain
from nodeagent.api.pod_validation import validate_pod_spec

FieldErrors = list[dict[str, str]]

_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_C_IDENT = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def err(reason: str, field: str, message: str) -> dict[str, str]:
    return {"reason": reason, "message": message, "field": field}


def invalid(field: str, value: Any, detail: str) -> dict[str, str]:
    return err("FieldValueInvalid", field, f"Invalid value: {_fmt(value)}: {detail}")


def required(field: str, detail: str = "") -> dict[str, str]:
    return err("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))


def _fmt(v: Any) -> str:
    if isinstance(v, str):
        return f'"{v}"'
    return str(v)


def dns1035_label(value: str) -> list[str]:
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _DNS1035_LABEL.match(value):
        out.append("a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
                   "start with an alphabetic character, and end with an alphanumeric character (e.g. "
                   "'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
    return out


def path_segment_name(value: str) -> list[str]:
    if value in (".", ".."):
        return [f"may not be '{value}'"]
    for bad in ("/", "%"):
        if bad in value:
            return [f"may not contain '{bad}'"]
    return []


def qualified_name(value: str) -> list[str]:
    prefix, slash, name = value.rpartition("/")
    out = []
    if slash:
        if not prefix:
            out.append("prefix part must be non-empty")
        else:
            out += ["prefix part " + m for m in dns1123_subdomain(prefix)]
    if not name:
        out.append("name part must be non-empty")
    else:
        if len(name) > 63:
            out.append("name part must be no more than 63 characters")
        if not _QUALIFIED_NAME.match(name):
            out.append("name part must consist of alphanumeric characters, '-', '_' or '.', and must "
                       "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
                       "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
    return out


def label_value(value: str) -> list[str]:
    out = []
    if len(value) > 63:
        out.append("must be no more than 63 characters")
    if not _LABEL_VALUE.match(value):
        out.append("a valid label must be an empty string or consist of alphanumeric characters, "
                   "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  "
                   "or 'my_value',  or '12345', regex used for validation is "
                   "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
    return out


# Which name rule each kind uses (Kubernetes' per-kind ValidateName functions).
NAME_RULES: dict[str, Callable[[str], list[str]]] = {
    "Namespace": dns1123_label, "Service": dns1035_label, "Node": dns1123_subdomain,
    "Deployment": dns1123_subdomain, "ReplicaSet": dns1123_subdomain, "StatefulSet": dns1123_label,
    "DaemonSet": dns1123_subdomain, "Job": dns1123_subdomain, "CronJob": dns1123_subdomain,
    "Event": path_segment_name, "Lease": dns1123_subdomain,
    # rbac's ValidateRBACName: any path segment ("system:controller:x", "kubeadm:…")
    "Role": path_segment_name, "ClusterRole": path_segment_name, "RoleBinding": path_segment_name,
    "ClusterRoleBinding": path_segment_name,
}


def validate_metadata(obj: dict[str, Any], kind: str, namespaced: bool) -> FieldErrors:
    meta = obj.get("metadata")
    errs: FieldErrors = []
    if not isinstance(meta, dict):
        return [required("metadata")]
    name = meta.get("name")
    if not name and not meta.get("generateName"):
        errs.append(required("metadata.name", "name or generateName is required"))
    elif name:
        if not isinstance(name, str):
            errs.append(invalid("metadata.name", name, "must be a string"))
        else:
            for m in NAME_RULES.get(kind, dns1123_subdomain)(name):
                errs.append(invalid("metadata.name", name, m))
    for field in ("labels", "annotations"):
        v = meta.get(field)
        if v is None:
            continue
        if not isinstance(v, dict):
            errs.append(invalid(f"metadata.{field}", v, "must be a map of strings"))
            continue
        for k, val in v.items():
            for m in qualified_name(k):
                errs.append(invalid(f"metadata.{field}", k, m))
            if not isinstance(val, str):
                errs.append(invalid(f"metadata.{field}", val, "must be a string"))
            elif field == "labels":
                for m in label_value(val):
                    errs.append(invalid("metadata.labels", val, m))
        if field == "annotations" and sum(len(k) + len(str(x)) for k, x in v.items()) > 256 * 1024:
            errs.append(err("FieldValueTooLong", "metadata.annotations",
                            "Too long: must have at most 262144 bytes"))
    return errs


def _containers(spec: dict[str, Any], base: str) -> FieldErrors:
    errs: FieldErrors = []
    cs = spec.get("containers")
    if not cs:
        return [required(f"{base}.containers")]
    seen: set[str] = set()
    for field in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(field) or []):
            p = f"{base}.{field}[{i}]"
            if not isinstance(c, dict):
                errs.append(invalid(p, c, "must be an object"))
                continue
            name = c.get("name")
            if not name:
                errs.append(required(f"{p}.name"))
            else:
                for m in dns1123_label(str(name)):
                    errs.append(invalid(f"{p}.name", name, m))
                if name in seen:
                    errs.append(err("FieldValueDuplicate", f"{p}.name", f'Duplicate value: "{name}"'))
                seen.add(name)
            if not c.get("image"):
                errs.append(required(f"{p}.image"))
            for j, port in enumerate(c.get("ports") or []):
                cp = port.get("containerPort") if isinstance(port, dict) else None
                if not isinstance(cp, int) or not 0 < cp < 65536:
                    errs.append(invalid(f"{p}.ports[{j}].containerPort", cp,
                                        "must be between 1 and 65535, inclusive"))
    rp = spec.get("restartPolicy")
    if rp is not None and rp not in ("Always", "OnFailure", "Never"):
        errs.append(err("FieldValueNotSupported", f"{base}.restartPolicy",
                        f'Unsupported value: "{rp}": supported values: "Always", "OnFailure", "Never"'))
    return errs + validate_pod_spec(spec, base)


PULL_POLICIES = ("Always", "IfNotPresent", "Never")


def _image_volumes(spec: dict[str, Any], base: str, is_pod: bool) -> FieldErrors:
    """kube-apiserver's rules for `volumes[].image` (KEP-4639, ImageVolume): a reference (on a pod; a
    template may leave it to be filled in), a known pullPolicy, and no subPathExpr on its mounts."""
    errs: FieldErrors = []
    images = set()
    for i, v in enumerate(spec.get("volumes") or []):
        src = v.get("image") if isinstance(v, dict) else None
        if src is None:
            continue
        p = f"{base}.volumes[{i}].image"
        if not isinstance(src, dict):
            errs.append(invalid(p, src, "must be an object"))
            continue
        images.add(v.get("name"))
        if is_pod and not src.get("reference"):
            errs.append(required(f"{p}.reference"))
        pp = src.get("pullPolicy")
        if pp is not None and pp not in PULL_POLICIES:
            supported = ", ".join(f'"{x}"' for x in PULL_POLICIES)
            errs.append(err("FieldValueNotSupported", f"{p}.pullPolicy",
                            f'Unsupported value: "{pp}": supported values: {supported}'))
    for field in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(field) or []):
            for j, vm in enumerate((c.get("volumeMounts") or []) if isinstance(c, dict) else []):
                if isinstance(vm, dict) and vm.get("name") in images and vm.get("subPathExpr"):
                    at = f"{base}.{field}[{i}].volumeMounts[{j}].subPathExpr"
                    errs.append(invalid(at, vm["subPathExpr"], "not allowed in image volume sources"))
    return errs


def _pod_template(tpl: Any, base: str, selector: Any) -> FieldErrors:
    if not isinstance(tpl, dict):
        return [required(base)]
    errs = _containers(tpl.get("spec") or {}, f"{base}.spec")
    errs += _image_volumes(tpl.get("spec") or {}, f"{base}.spec", is_pod=False)
    if isinstance(selector, dict):
        from nodeagent.api.selectors import SelectorError, from_label_selector

        try:
            sel = from_label_selector(selector)
        except SelectorError as e:
            return errs + [invalid(base.rsplit(".", 1)[0] + ".selector", selector, str(e))]
        labels = (tpl.get("metadata") or {}).get("labels") or {}
        if not sel.matches(labels):
            errs.append(invalid(f"{base}.metadata.labels", labels,
                                "`selector` does not match template `labels`"))
    return errs


def _service(spec: dict[str, Any]) -> FieldErrors:
    errs: FieldErrors = []
    typ = spec.get("type", "ClusterIP")
    if typ not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
        errs.append(err("FieldValueNotSupported", "spec.type",
                        f'Unsupported value: "{typ}": supported values: '
                        '"ClusterIP", "ExternalName", "LoadBalancer", "NodePort"'))
    ports = spec.get("ports") or []
    if not ports and typ != "ExternalName" and spec.get("clusterIP") != "None":
        errs.append(required("spec.ports"))
    names: set[str] = set()
    for i, p in enumerate(ports):
        port = p.get("port") if isinstance(p, dict) else None
        if not isinstance(port, int) or not 0 < port < 65536:
            errs.append(invalid(f"spec.ports[{i}].port", port, "must be between 1 and 65535, inclusive"))
        if len(ports) > 1 and not p.get("name"):
            errs.append(required(f"spec.ports[{i}].name"))
        if p.get("name"):
            if p["name"] in names:
                errs.append(err("FieldValueDuplicate", f"spec.ports[{i}].name",
                                f'Duplicate value: "{p["name"]}"'))
            names.add(p["name"])
        proto = p.get("protocol", "TCP")
        if proto not in ("TCP", "UDP", "SCTP"):
            errs.append(err("FieldValueNotSupported", f"spec.ports[{i}].protocol",
                            f'Unsupported value: "{proto}": supported values: "SCTP", "TCP", "UDP"'))
        np = p.get("nodePort")
        if np is not None and typ == "ClusterIP":
            errs.append(err("FieldValueForbidden", f"spec.ports[{i}].nodePort",
                            "Forbidden: may not be used when `type` is 'ClusterIP'"))
    return errs + _service_load_balancer(spec, typ)


def _service_status(status: Any) -> FieldErrors:
    """status.loadBalancer.ingress[].ipMode as kube-apiserver checks it."""
    errs: FieldErrors = []
    lb = (status or {}).get("loadBalancer") if isinstance(status, dict) else None
    for i, ing in enumerate((lb or {}).get("ingress") or [] if isinstance(lb, dict) else []):
        if not isinstance(ing, dict) or ing.get("ipMode") is None:
            continue
        field = f"status.loadBalancer.ingress[{i}].ipMode"
        if ing["ipMode"] not in ("VIP", "Proxy"):
            errs.append(err("FieldValueNotSupported", field,
                            f'Unsupported value: "{ing["ipMode"]}": supported values: "Proxy", "VIP"'))
        elif not ing.get("ip"):
            errs.append(err("FieldValueForbidden", field, "Forbidden: may not be specified when `ip` is not"))
    return errs


def _service_load_balancer(spec: dict[str, Any], typ: str) -> FieldErrors:
    """kube-apiserver's checks of the LoadBalancer fields (ValidateService)."""
    import ipaddress

    errs: FieldErrors = []
    lb = typ == "LoadBalancer"
    for f in ("loadBalancerSourceRanges", "loadBalancerClass"):
        if spec.get(f) and not lb:
            errs.append(err("FieldValueForbidden", f"spec.{f}",
                            "Forbidden: may only be used when `type` is 'LoadBalancer'"))
    if spec.get("allocateLoadBalancerNodePorts") is not None and not lb:
        errs.append(err("FieldValueForbidden", "spec.allocateLoadBalancerNodePorts",
                        "Forbidden: may only be used when `type` is 'LoadBalancer'"))
    for i, cidr in enumerate(spec.get("loadBalancerSourceRanges") or []):
        try:
            ipaddress.ip_network(str(cidr).strip(), strict=False)
        except ValueError:
            errs.append(invalid(f"spec.loadBalancerSourceRanges[{i}]", cidr,
                                "must be a list of IP ranges. For example, 10.240.0.0/24,10.250.0.0/24 "))
    ip = spec.get("loadBalancerIP")
    if ip:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            errs.append(invalid("spec.loadBalancerIP", ip, "must be a valid IP address"))
    hc = spec.get("healthCheckNodePort")
    if hc and not (lb and spec.get("externalTrafficPolicy") == "Local"):
        errs.append(invalid("spec.healthCheckNodePort", hc,
                            "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` "
                            "is 'Local'"))
    return errs


def _label_selector(sel: Any, field: str) -> FieldErrors:
    from nodeagent.api.selectors import SelectorError, from_label_selector

    if sel is None:
        return []
    if not isinstance(sel, dict):
        return [invalid(field, sel, "must be an object")]
    try:
        from_label_selector(sel)
    except (SelectorError, KeyError, TypeError) as e:
        return [invalid(field, sel, str(e))]
    return []


def _np_port(p: Any, base: str) -> FieldErrors:
    if not isinstance(p, dict):
        return [invalid(base, p, "must be an object")]
    errs: FieldErrors = []
    proto = p.get("protocol", "TCP")
    if proto not in ("TCP", "UDP", "SCTP"):
        errs.append(err("FieldValueNotSupported", f"{base}.protocol",
                        f'Unsupported value: "{proto}": supported values: "SCTP", "TCP", "UDP"'))
    port, end = p.get("port"), p.get("endPort")
    if isinstance(port, int) and not isinstance(port, bool):
        if not 0 < port < 65536:
            errs.append(invalid(f"{base}.port", port, "must be between 1 and 65535, inclusive"))
    elif isinstance(port, str):
        if len(port) > 15 or not re.match(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", port) or "--" in port \
                or not re.search(r"[a-z]", port):
            errs.append(invalid(f"{base}.port", port, "must be a valid port name (IANA_SVC_NAME: at most 15 "
                                "lower-case alphanumerics or '-', at least one letter)"))
        if end is not None:
            errs.append(invalid(f"{base}.endPort", end, "may not be specified when `port` is non-numeric"))
    elif port is not None:
        errs.append(invalid(f"{base}.port", port, "must be a port number or name"))
    if end is not None and (port is None or isinstance(port, int)):
        if port is None:
            errs.append(invalid(f"{base}.endPort", end, "may not be specified when `port` is not specified"))
        elif not isinstance(end, int) or not 0 < end < 65536:
            errs.append(invalid(f"{base}.endPort", end, "must be between 1 and 65535, inclusive"))
        elif end < port:
            errs.append(invalid(f"{base}.endPort", end, "must be greater than or equal to `port`"))
    return errs


def _np_peer(peer: Any, base: str) -> FieldErrors:
    import ipaddress

    if not isinstance(peer, dict):
        return [invalid(base, peer, "must be an object")]
    keys = [k for k in ("podSelector", "namespaceSelector", "ipBlock") if peer.get(k) is not None]
    if not keys:
        return [required(base, "must specify a peer")]
    if "ipBlock" in keys and len(keys) > 1:
        return [err("FieldValueForbidden", base, "Forbidden: may not specify both ipBlock and another peer")]
    errs = _label_selector(peer.get("podSelector"), f"{base}.podSelector")
    errs += _label_selector(peer.get("namespaceSelector"), f"{base}.namespaceSelector")
    blk = peer.get("ipBlock")
    if blk is not None:
        cidr = blk.get("cidr") if isinstance(blk, dict) else None
        if not cidr:
            return errs + [required(f"{base}.ipBlock.cidr")]
        try:
            net = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            return errs + [invalid(f"{base}.ipBlock.cidr", cidr,
                                   "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)")]
        for j, ex in enumerate(blk.get("except") or []):
            f = f"{base}.ipBlock.except[{j}]"
            try:
                e = ipaddress.ip_network(ex, strict=False)
            except (ValueError, TypeError):
                errs.append(invalid(f, ex, "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"))
                continue
            if not subnet_of(e, net) or e.prefixlen <= net.prefixlen:
                errs.append(invalid(f, ex, "must be a strict subset of `cidr`"))
    return errs


def _network_policy(spec: dict[str, Any]) -> FieldErrors:
    """networking.k8s.io/v1 NetworkPolicy, as Kubernetes' ValidateNetworkPolicySpec words it."""
    errs = _label_selector(spec.get("podSelector"), "spec.podSelector")
    types = spec.get("policyTypes") or []
    for i, t in enumerate(types):
        if t not in ("Ingress", "Egress"):
            errs.append(err("FieldValueNotSupported", f"spec.policyTypes[{i}]",
                            f'Unsupported value: "{t}": supported values: "Ingress", "Egress"'))
    if len(types) > 2:
        errs.append(invalid("spec.policyTypes", types, "may not specify more than two policyTypes"))
    for field, peers in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(field) or []):
            base = f"spec.{field}[{i}]"
            if not isinstance(rule, dict):
                errs.append(invalid(base, rule, "must be an object"))
                continue
            for j, p in enumerate(rule.get("ports") or []):
                errs += _np_port(p, f"{base}.ports[{j}]")
            for j, peer in enumerate(rule.get(peers) or []):
                errs += _np_peer(peer, f"{base}.{peers}[{j}]")
    return errs


def validate(obj: dict[str, Any], kind: str, namespaced: bool) -> FieldErrors:
    """Every field error for a create or update of `obj` (metadata plus the kind's spec rules)."""
    errs = validate_metadata(obj, kind, namespaced)
    spec = obj.get("spec")
    if spec is not None and not isinstance(spec, dict):
        return errs + [invalid("spec", spec, "must be an object")]
    spec = spec or {}
    if kind == "Pod":
        errs += _containers(spec, "spec")
        errs += _image_volumes(spec, "spec", is_pod=True)
    elif kind in ("Deployment", "ReplicaSet", "DaemonSet", "StatefulSet"):
        if not spec.get("selector"):
            errs.append(required("spec.selector"))
        errs += _pod_template(spec.get("template"), "spec.template", spec.get("selector"))
        r = spec.get("replicas")
        if r is not None and (not isinstance(r, int) or r < 0):
            errs.append(invalid("spec.replicas", r, "must be greater than or equal to 0"))
    elif kind == "Job":
        errs += _pod_template(spec.get("template"), "spec.template", None)
        rp = ((spec.get("template") or {}).get("spec") or {}).get("restartPolicy")
        if rp not in (None, "OnFailure", "Never"):
            errs.append(err("FieldValueNotSupported", "spec.template.spec.restartPolicy",
                            f'Unsupported value: "{rp}": supported values: "OnFailure", "Never"'))
    elif kind == "CronJob":
        if not spec.get("schedule"):
            errs.append(required("spec.schedule"))
        tpl = (spec.get("jobTemplate") or {}).get("spec") or {}
        errs += _pod_template(tpl.get("template"), "spec.jobTemplate.spec.template", None)
    elif kind == "Service":
        errs += _service(spec) + _service_status(obj.get("status"))
    elif kind == "NetworkPolicy":
        errs += _network_policy(spec)
    elif kind == "ConfigMap" or kind == "Secret":
        for field in ("data", "binaryData", "stringData"):
            for k in (obj.get(field) or {}):
                # IsConfigMapKey: a key may start with a digit (an env var name may not: the kubelet
                # skips such keys in envFrom with an event)
                if not _CONFIG_KEY.match(k) or len(k) > 253:
                    errs.append(invalid(f"{field}[{k}]", k, "a valid config key must consist of alphanumeric "
                                        "characters, '-', '_' or '.'"))
                elif k in (".", "..") or k.startswith(".."):
                    errs.append(invalid(f"{field}[{k}]", k, "must not be '.' or '..'" if k in (".", "..")
                                        else "must not start with '..'"))
    elif kind == "PriorityClass":
        if not isinstance(obj.get("value"), int):
            errs.append(required("value"))
    elif kind == "PersistentVolume":
        errs += storage.validate_pv(obj)
    elif kind == "PersistentVolumeClaim":
        errs += storage.validate_pvc(obj)
    elif kind == "StorageClass":
        errs += storage.validate_sc(obj)
    elif kind == "CSIDriver":
        errs += csi.validate_csidriver(obj)
    elif kind == "CSINode":
        errs += csi.validate_csinode(obj)
    elif kind == "VolumeAttachment":
        errs += csi.validate_volumeattachment(obj)
    return errs


def _immutable(field: str) -> dict[str, str]:
    return err("FieldValueInvalid", field, "field is immutable")


def validate_update(new: dict[str, Any], old: dict[str, Any], kind: str) -> FieldErrors:
    """Rules that compare an update with the stored object (immutable fields), as Kubernetes enforces them."""
    ns, os_ = new.get("spec") or {}, old.get("spec") or {}
    errs: FieldErrors = []
    if kind == "Pod":
        errs += _pod_update(ns, os_)
    elif kind in ("Deployment", "ReplicaSet", "DaemonSet", "StatefulSet") \
            and ns.get("selector") != os_.get("selector"):
        errs.append(_immutable("spec.selector"))
    elif kind == "Job" and ns.get("selector") is not None and os_.get("selector") is not None \
            and ns.get("selector") != os_.get("selector"):
        errs.append(_immutable("spec.selector"))
    elif kind == "Service":
        oip, nip = os_.get("clusterIP"), ns.get("clusterIP")
        if oip and nip and oip != nip and os_.get("type") != "ExternalName" \
                and ns.get("type") != "ExternalName":
            errs.append(err("FieldValueInvalid", "spec.clusterIPs[0]",
                            f'Invalid value: []string{{"{nip}"}}: may not change once set'))
        ocls, ncls = os_.get("loadBalancerClass"), ns.get("loadBalancerClass")
        if ocls and ocls != ncls and os_.get("type") == "LoadBalancer" and ns.get("type") == "LoadBalancer":
            errs.append(invalid("spec.loadBalancerClass", ncls, "may not change once set"))
        elif ncls and not ocls and os_.get("type") == "LoadBalancer":
            errs.append(invalid("spec.loadBalancerClass", ncls, "may not change once set"))
    elif kind == "PersistentVolumeClaim":
        errs += storage.validate_pvc_update(new, old)
    elif kind == "PersistentVolume":
        errs += storage.validate_pv_update(new, old)
    elif kind == "StorageClass":
        errs += storage.validate_sc_update(new, old)
    elif kind in ("ConfigMap", "Secret") and old.get("immutable"):
        for f in ("data", "binaryData"):
            if new.get(f) != old.get(f):
                errs.append(err("FieldValueForbidden", f,
                                "Forbidden: field is immutable when `immutable` is set"))
    return errs


_POD_MUTABLE = ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates")


def _pod_update(new: dict[str, Any], old: dict[str, Any]) -> FieldErrors:
    """A pod's spec is immutable except container images, activeDeadlineSeconds, added tolerations,
    terminationGracePeriodSeconds (to shorten it) and removed scheduling gates."""
    def strip(spec: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in spec.items() if k not in _POD_MUTABLE}
        for f in ("containers", "initContainers"):
            if isinstance(out.get(f), list):
                out[f] = [{k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                          for c in out[f]]
        return out

    errs: FieldErrors = []
    if old.get("nodeName") and new.get("nodeName") != old.get("nodeName") or \
            not old.get("nodeName") and new.get("nodeName"):
        errs.append(err("FieldValueForbidden", "spec.nodeName",
                        "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                        "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, "
                        "`spec.tolerations` (only additions to existing tolerations), "
                        "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
                        "previously negative)"))
    elif strip(new) != strip(old):
        errs.append(err("FieldValueForbidden", "spec",
                        "Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                        "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, "
                        "`spec.tolerations` (only additions to existing tolerations), "
                        "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
                        "previously negative)"))
    ads_new, ads_old = new.get("activeDeadlineSeconds"), old.get("activeDeadlineSeconds")
    if ads_old is not None and ads_new is None:
        errs.append(invalid("spec.activeDeadlineSeconds", "null", "must not update from a positive integer "
                            "to nil value"))
    elif ads_old is not None and isinstance(ads_new, int) and ads_new > ads_old:
        errs.append(invalid("spec.activeDeadlineSeconds", ads_new,
                            "must be less than or equal to previous value"))
    old_g = [g.get("name") for g in old.get("schedulingGates") or [] if isinstance(g, dict)]
    if any((g or {}).get("name") not in old_g for g in new.get("schedulingGates") or []):
        errs.append(err("FieldValueForbidden", "spec.schedulingGates",
                        "Forbidden: only deletion is allowed, but found new scheduling gate"))
    old_t = old.get("tolerations") or []
    if not errs and any(t not in (new.get("tolerations") or []) for t in old_t):
        errs.append(err("FieldValueForbidden", "spec.tolerations",
                        "Forbidden: existing toleration can not be modified "
                        "except its tolerationSeconds"))
    return errs
