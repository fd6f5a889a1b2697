"""Pod spec fields beyond names and images, validated as kube-apiserver's ValidatePodSpec words it
(pkg/apis/core/validation): security contexts, os, hostAliases, DNS, lifecycle handlers, sidecars, topology
spread, readiness gates, ephemeral containers on create. Each returns field errors for `validation`.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from typing import Any, TypeGuard

from nodeagent.api.env_validation import validate_env
from nodeagent.api.names import dns1123_label, dns1123_subdomain

FieldErrors = list[dict[str, str]]

MAX_ID = 2147483647
_SYSCTL = re.compile(r"^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$")
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
# What a windows pod may not set (validateWindows / validateLinux in ValidatePodSpec's OS checks).
_LINUX_ONLY_POD = ("seLinuxOptions", "seccompProfile", "appArmorProfile", "fsGroup", "fsGroupChangePolicy",
                   "sysctls", "runAsUser", "runAsGroup", "supplementalGroups", "supplementalGroupsPolicy")
_LINUX_ONLY_CONTAINER = ("seLinuxOptions", "seccompProfile", "appArmorProfile", "capabilities",
                         "readOnlyRootFilesystem", "privileged", "allowPrivilegeEscalation", "procMount",
                         "runAsUser", "runAsGroup")


def _err(reason: str, field: str, message: str) -> dict[str, str]:
    return {"reason": reason, "message": message, "field": field}


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return f'"{v}"' if isinstance(v, str) else str(v)


def _invalid(field: str, value: Any, detail: str) -> dict[str, str]:
    return _err("FieldValueInvalid", field, f"Invalid value: {_fmt(value)}: {detail}")


def _required(field: str, detail: str = "") -> dict[str, str]:
    return _err("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))


def _forbidden(field: str, detail: str) -> dict[str, str]:
    return _err("FieldValueForbidden", field, f"Forbidden: {detail}")


def _unsupported(field: str, value: Any, supported: tuple[str, ...]) -> dict[str, str]:
    return _err("FieldValueNotSupported", field, f"Unsupported value: {_fmt(value)}: supported values: "
                + ", ".join(f'"{s}"' for s in supported))


def _int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _id(field: str, v: Any) -> FieldErrors:
    if v is None:
        return []
    if not _int(v) or not 0 <= v <= MAX_ID:
        return [_invalid(field, v, f"must be between 0 and {MAX_ID}, inclusive")]
    return []


def _profile(p: Any, field: str, kinds: tuple[str, ...]) -> FieldErrors:
    if p is None:
        return []
    if not isinstance(p, dict):
        return [_invalid(field, p, "must be an object")]
    kind = p.get("type")
    if not kind:
        return [_required(f"{field}.type")]
    if kind not in kinds:
        return [_unsupported(f"{field}.type", kind, kinds)]
    local = p.get("localhostProfile")
    if kind == "Localhost" and not local:
        return [_required(f"{field}.localhostProfile", "must be set when seccomp type is Localhost"
                          if "seccomp" in field else "must be set when AppArmor type is Localhost")]
    if kind != "Localhost" and local is not None:
        return [_invalid(f"{field}.localhostProfile", local, "can only be set when seccomp type is Localhost"
                         if "seccomp" in field else "can only be set when AppArmor type is Localhost")]
    return []


def _common_sc(sc: dict[str, Any], base: str) -> FieldErrors:
    errs = _id(f"{base}.runAsUser", sc.get("runAsUser")) + _id(f"{base}.runAsGroup", sc.get("runAsGroup"))
    errs += _profile(sc.get("seccompProfile"), f"{base}.seccompProfile", ("Localhost", "RuntimeDefault",
                                                                         "Unconfined"))
    errs += _profile(sc.get("appArmorProfile"), f"{base}.appArmorProfile", ("Localhost", "RuntimeDefault",
                                                                           "Unconfined"))
    return errs


def _security_context(holder: dict[str, Any], base: str) -> tuple[dict[str, Any], str, FieldErrors]:
    """The holder's securityContext ({} when unset), its path, and the checks pods and containers share."""
    sc = holder.get("securityContext")
    f = f"{base}.securityContext"
    if sc is None:
        return {}, f, []
    if not isinstance(sc, dict):
        return {}, f, [_invalid(f, sc, "must be an object")]
    return sc, f, _common_sc(sc, f)


def _pod_security(spec: dict[str, Any], base: str) -> FieldErrors:
    psc, f, errs = _security_context(spec, base)
    if not psc:
        return errs
    errs += _id(f"{f}.fsGroup", psc.get("fsGroup"))
    for i, g in enumerate(psc.get("supplementalGroups") or []):
        errs += _id(f"{f}.supplementalGroups[{i}]", g)
    pol = psc.get("fsGroupChangePolicy")
    if pol is not None and pol not in ("OnRootMismatch", "Always"):
        errs.append(_unsupported(f"{f}.fsGroupChangePolicy", pol, ("OnRootMismatch", "Always")))
    pol = psc.get("supplementalGroupsPolicy")
    if pol is not None and pol not in ("Merge", "Strict"):
        errs.append(_unsupported(f"{f}.supplementalGroupsPolicy", pol, ("Merge", "Strict")))
    seen: set[str] = set()
    for i, s in enumerate(psc.get("sysctls") or []):
        name = s.get("name") if isinstance(s, dict) else None
        sf = f"{f}.sysctls[{i}].name"
        if not name:
            errs.append(_required(sf))
        elif len(name) > 253 or not _SYSCTL.match(name):
            errs.append(_invalid(sf, name, "must have at most 253 characters and match regex "
                                 + _SYSCTL.pattern))
        elif name in seen:
            errs.append(_err("FieldValueDuplicate", sf, f'Duplicate value: "{name}"'))
        seen.add(name or "")
    return errs


def _container_security(c: dict[str, Any], base: str) -> FieldErrors:
    sc, f, errs = _security_context(c, base)
    if not sc:
        return errs
    pm = sc.get("procMount")
    if pm is not None and pm not in ("Default", "Unmasked"):
        errs.append(_unsupported(f"{f}.procMount", pm, ("Default", "Unmasked")))
    if sc.get("allowPrivilegeEscalation") is False:
        if sc.get("privileged"):
            errs.append(_invalid(f, sc, "cannot set `allowPrivilegeEscalation` to false and `privileged` "
                                 "to true"))
        adds = (sc.get("capabilities") or {}).get("add") or []
        if "CAP_SYS_ADMIN" in adds or "SYS_ADMIN" in adds:
            errs.append(_invalid(f, sc, "cannot set `allowPrivilegeEscalation` to false and "
                                 "`capabilities.Add` CAP_SYS_ADMIN"))
    return errs


def _handler(h: Any, field: str, grace: int) -> FieldErrors:
    if not isinstance(h, dict):
        return [_invalid(field, h, "must be an object")]
    kinds = [k for k in ("exec", "httpGet", "tcpSocket", "sleep") if h.get(k) is not None]
    if not kinds:
        return [_required(field, "must specify a handler type")]
    if len(kinds) > 1:
        return [_forbidden(f"{field}.{kinds[1]}", "may not specify more than 1 handler type")]
    if kinds[0] == "exec" and not (h["exec"] or {}).get("command"):
        return [_required(f"{field}.exec.command")]
    if kinds[0] == "sleep":
        secs = (h["sleep"] or {}).get("seconds")
        if not _int(secs) or not 0 <= secs <= grace:
            return [_invalid(f"{field}.sleep.seconds", secs, "must be non-negative and less than "
                             f"terminationGracePeriodSeconds ({grace})")]
    if kinds[0] in ("httpGet", "tcpSocket"):
        port = (h[kinds[0]] or {}).get("port")
        if port is None or port == "":
            return [_required(f"{field}.{kinds[0]}.port")]
        if _int(port) and not 0 < port < 65536:
            return [_invalid(f"{field}.{kinds[0]}.port", port, "must be between 1 and 65535, inclusive")]
    return []


def _probe(p: Any, field: str, kind: str) -> FieldErrors:
    """validateProbe: one handler (exec, httpGet, tcpSocket, grpc), non-negative numbers, successThreshold 1
    for liveness and startup probes, a positive terminationGracePeriodSeconds (not on readiness)."""
    if not isinstance(p, dict):
        return [_invalid(field, p, "must be an object")]
    kinds = [k for k in ("exec", "httpGet", "tcpSocket", "grpc") if p.get(k) is not None]
    errs: FieldErrors = []
    if not kinds:
        errs.append(_required(field, "must specify a handler type"))
    elif len(kinds) > 1:
        errs.append(_forbidden(f"{field}.{kinds[1]}", "may not specify more than 1 handler type"))
    for k in ("initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold",
              "failureThreshold"):
        v = p.get(k)
        if v is not None and (not _int(v) or v < 0):
            errs.append(_invalid(f"{field}.{k}", v, "must be greater than or equal to 0"))
    if kind in ("livenessProbe", "startupProbe") and p.get("successThreshold") not in (None, 1):
        errs.append(_invalid(f"{field}.successThreshold", p["successThreshold"], "must be 1"))
    g = p.get("terminationGracePeriodSeconds")
    if g is not None:
        if kind == "readinessProbe":
            errs.append(_invalid(f"{field}.terminationGracePeriodSeconds", g, "must not be set for "
                                 "readinessProbes"))
        elif not _int(g) or g <= 0:
            errs.append(_invalid(f"{field}.terminationGracePeriodSeconds", g, "must be greater than 0"))
    return errs


def _volume_mounts(c: dict[str, Any], base: str) -> FieldErrors:
    """mountPropagation and recursiveReadOnly of each volumeMount (validateMountPropagation,
    validateMountRecursiveReadOnly)."""
    errs: FieldErrors = []
    privileged = bool((c.get("securityContext") or {}).get("privileged"))
    for i, vm in enumerate(c.get("volumeMounts") or []):
        if not isinstance(vm, dict):
            continue
        f = f"{base}.volumeMounts[{i}]"
        prop = vm.get("mountPropagation")
        if prop is not None and prop not in ("Bidirectional", "HostToContainer", "None"):
            errs.append(_unsupported(f"{base}.volumeMounts.mountPropagation", prop,
                                     ("Bidirectional", "HostToContainer", "None")))
        elif prop == "Bidirectional" and not privileged:
            errs.append(_forbidden(f"{base}.volumeMounts.mountPropagation", "Bidirectional mount propagation "
                                   "is available only to privileged containers"))
        rro = vm.get("recursiveReadOnly")
        if rro is None:
            continue
        if rro not in ("Disabled", "IfPossible", "Enabled"):
            errs.append(_unsupported(f"{f}.recursiveReadOnly", rro, ("Disabled", "IfPossible", "Enabled")))
        elif rro != "Disabled" and not vm.get("readOnly"):
            errs.append(_forbidden(f"{f}.recursiveReadOnly", "may only be specified when readOnly is true"))
        elif rro != "Disabled" and prop not in (None, "None"):
            errs.append(_forbidden(f"{f}.recursiveReadOnly",
                                   "may only be specified when mountPropagation is None or not specified"))
    return errs


def _container(c: dict[str, Any], base: str, init: bool, spec: dict[str, Any]) -> FieldErrors:
    errs = validate_env(c, base) + _container_security(c, base) + _volume_mounts(c, base)
    if (c.get("securityContext") or {}).get("procMount") == "Unmasked" and spec.get("hostUsers") is not False:
        errs.append(_invalid(f"{base}.securityContext.procMount", "Unmasked",
                             "`hostUsers` must be false to use `Unmasked`"))
    g = spec.get("terminationGracePeriodSeconds")
    grace = g if _int(g) else 30
    pol = c.get("imagePullPolicy")
    if pol is not None and pol not in ("Always", "IfNotPresent", "Never"):
        errs.append(_unsupported(f"{base}.imagePullPolicy", pol, ("Always", "IfNotPresent", "Never")))
    tmp = c.get("terminationMessagePolicy")
    if tmp is not None and tmp not in ("File", "FallbackToLogsOnError"):
        errs.append(_unsupported(f"{base}.terminationMessagePolicy", tmp, ("File", "FallbackToLogsOnError")))
    rp = c.get("restartPolicy")
    sidecar = init and rp == "Always"
    if rp is not None:
        if not init:
            errs.append(_forbidden(f"{base}.restartPolicy", "may not be set for non-init containers"))
        elif rp != "Always":
            errs.append(_unsupported(f"{base}.restartPolicy", rp, ("Always",)))
    if init and not sidecar:
        for k in ("lifecycle", "livenessProbe", "readinessProbe", "startupProbe"):
            if c.get(k) is not None:
                errs.append(_forbidden(f"{base}.{k}", "may not be set for init containers without "
                                       "restartPolicy=Always"))
        return errs
    for hook in ("postStart", "preStop"):
        h = (c.get("lifecycle") or {}).get(hook)
        if h is not None:
            errs += _handler(h, f"{base}.lifecycle.{hook}", grace)
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        if c.get(kind) is not None:
            errs += _probe(c[kind], f"{base}.{kind}", kind)
    for hostport in c.get("ports") or []:
        if not isinstance(hostport, dict):
            continue
        if spec.get("hostNetwork") and hostport.get("hostPort") not in (None, hostport.get("containerPort")):
            i = (c.get("ports") or []).index(hostport)
            errs.append(_invalid(f"{base}.ports[{i}].hostPort", hostport["hostPort"],
                                 "must match `containerPort` when `hostNetwork` is true"))
    return errs


def _os(spec: dict[str, Any], base: str) -> FieldErrors:
    os_ = spec.get("os")
    if os_ is None:
        return []
    name = (os_ or {}).get("name") if isinstance(os_, dict) else None
    if not name:
        return [_required(f"{base}.os.name")]
    if name not in ("linux", "windows"):
        return [_unsupported(f"{base}.os.name", name, ("linux", "windows"))]
    errs: FieldErrors = []
    psc = spec.get("securityContext") or {}
    containers = [(f, i, c) for f in ("initContainers", "containers", "ephemeralContainers")
                  for i, c in enumerate(spec.get(f) or []) if isinstance(c, dict)]
    if name == "windows":
        msg = "may not be set for a windows pod"
        if spec.get("shareProcessNamespace") is not None:
            errs.append(_forbidden(f"{base}.shareProcessNamespace", msg))
        if spec.get("hostUsers") is not None:
            errs.append(_forbidden(f"{base}.hostUsers", msg))
        errs += [_forbidden(f"{base}.securityContext.{k}", msg) for k in _LINUX_ONLY_POD
                 if psc.get(k) is not None]
        for f, i, c in containers:
            csc = c.get("securityContext") or {}
            errs += [_forbidden(f"{base}.{f}[{i}].securityContext.{k}", msg) for k in _LINUX_ONLY_CONTAINER
                     if csc.get(k) is not None]
    else:
        msg = "windows options cannot be set for a linux pod"
        if psc.get("windowsOptions") is not None:
            errs.append(_forbidden(f"{base}.securityContext.windowsOptions", msg))
        for f, i, c in containers:
            if (c.get("securityContext") or {}).get("windowsOptions") is not None:
                errs.append(_forbidden(f"{base}.{f}[{i}].securityContext.windowsOptions", msg))
    return errs


def _host_aliases(spec: dict[str, Any], base: str) -> FieldErrors:
    errs: FieldErrors = []
    for i, a in enumerate(spec.get("hostAliases") or []):
        f = f"{base}.hostAliases[{i}]"
        ip = a.get("ip") if isinstance(a, dict) else None
        if not ip:
            errs.append(_required(f"{f}.ip"))
        else:
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                errs.append(_invalid(f"{f}.ip", ip, "must be a valid IP address, (e.g. 10.9.8.7 or "
                                     "2001:db8::ffff)"))
        for j, h in enumerate((a or {}).get("hostnames") or []):
            errs += [_invalid(f"{f}.hostnames[{j}]", h, m) for m in dns1123_subdomain(str(h))]
    return errs


def _dns(spec: dict[str, Any], base: str) -> FieldErrors:
    errs: FieldErrors = []
    policy = spec.get("dnsPolicy")
    supported = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
    if policy is not None and policy not in supported:
        errs.append(_unsupported(f"{base}.dnsPolicy", policy, supported))
    cfg = spec.get("dnsConfig")
    if policy == "None" and cfg is None:
        errs.append(_required(f"{base}.dnsConfig", "must provide `dnsConfig` when `dnsPolicy` is None"))
    if not isinstance(cfg, dict):
        return errs
    servers = cfg.get("nameservers") or []
    if policy == "None" and not servers:
        errs.append(_required(f"{base}.dnsConfig.nameservers",
                              "must provide at least one DNS nameserver when `dnsPolicy` is None"))
    if len(servers) > 3:
        errs.append(_invalid(f"{base}.dnsConfig.nameservers", servers,
                             "must not have more than 3 nameservers"))
    for i, ns in enumerate(servers):
        try:
            ipaddress.ip_address(ns)
        except ValueError:
            errs.append(_invalid(f"{base}.dnsConfig.nameservers[{i}]", ns,
                                 "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
    searches = cfg.get("searches") or []
    if len(searches) > 32:
        errs.append(_invalid(f"{base}.dnsConfig.searches", searches,
                             "must not have more than 32 search paths"))
    if len(" ".join(searches)) > 2048:
        errs.append(_invalid(f"{base}.dnsConfig.searches", searches,
                             "must not have more than 2048 characters (including spaces) in the search list"))
    for i, o in enumerate(cfg.get("options") or []):
        if not (o or {}).get("name"):
            errs.append(_required(f"{base}.dnsConfig.options[{i}]", "Option.Name must not be empty"))
    return errs


def _topology_spread(spec: dict[str, Any], base: str) -> FieldErrors:
    errs: FieldErrors = []
    seen: set[tuple[str, str]] = set()
    for i, t in enumerate(spec.get("topologySpreadConstraints") or []):
        f = f"{base}.topologySpreadConstraints[{i}]"
        if not isinstance(t, dict):
            errs.append(_invalid(f, t, "must be an object"))
            continue
        skew = t.get("maxSkew")
        if not _int(skew) or skew <= 0:
            errs.append(_invalid(f"{f}.maxSkew", skew, "must be greater than zero"))
        if not t.get("topologyKey"):
            errs.append(_required(f"{f}.topologyKey", "can not be empty"))
        wu = t.get("whenUnsatisfiable")
        if wu not in ("DoNotSchedule", "ScheduleAnyway"):
            errs.append(_unsupported(f"{f}.whenUnsatisfiable", wu, ("DoNotSchedule", "ScheduleAnyway")))
        md = t.get("minDomains")
        if md is not None:
            if not _int(md) or md <= 0:
                errs.append(_invalid(f"{f}.minDomains", md, "must be greater than 0"))
            elif wu != "DoNotSchedule":
                errs.append(_invalid(f"{f}.minDomains", md, "can only use minDomains if "
                                     "whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway"))
        for k in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
            if t.get(k) is not None and t[k] not in ("Ignore", "Honor"):
                errs.append(_unsupported(f"{f}.{k}", t[k], ("Ignore", "Honor")))
        pair = (str(t.get("topologyKey")), str(wu))
        if pair in seen:
            errs.append(_err("FieldValueDuplicate", f"{f}.{{topologyKey, whenUnsatisfiable}}",
                             f'Duplicate value: "{pair[0]}, {pair[1]}"'))
        seen.add(pair)
    return errs


def _readiness_gates(spec: dict[str, Any], base: str) -> FieldErrors:
    errs: FieldErrors = []
    for i, g in enumerate(spec.get("readinessGates") or []):
        ct = (g or {}).get("conditionType", "") if isinstance(g, dict) else ""
        name = ct.rpartition("/")[2]
        if not ct or not _QUALIFIED.match(name) or len(name) > 63:
            errs.append(_invalid(f"{base}.readinessGates[{i}].conditionType", ct,
                                 "name part must consist of alphanumeric characters, '-', '_' or '.', and "
                                 "must start and end with an alphanumeric character"))
    return errs


def _scalars(spec: dict[str, Any], base: str) -> FieldErrors:
    errs: FieldErrors = []
    ads = spec.get("activeDeadlineSeconds")
    if ads is not None and (not _int(ads) or not 1 <= ads <= MAX_ID):
        errs.append(_invalid(f"{base}.activeDeadlineSeconds", ads,
                             f"must be between 1 and {MAX_ID}, inclusive"))
    g = spec.get("terminationGracePeriodSeconds")
    if g is not None and (not _int(g) or g < 0):
        errs.append(_invalid(f"{base}.terminationGracePeriodSeconds", g,
                             "must be greater than or equal to 0"))
    if spec.get("hostPID") and spec.get("shareProcessNamespace"):
        errs.append(_invalid(f"{base}.securityContext.shareProcessNamespace", True,
                             "ShareProcessNamespace and HostPID cannot both be enabled"))
    for k in ("hostname", "subdomain"):
        v = spec.get(k)
        if v is not None and v != "":
            errs += [_invalid(f"{base}.{k}", v, m) for m in dns1123_label(str(v))]
    return errs


def _scheduling_gates(spec: dict[str, Any], base: str) -> FieldErrors:
    errs: FieldErrors = []
    seen: set[str] = set()
    for i, g in enumerate(spec.get("schedulingGates") or []):
        name = (g or {}).get("name", "") if isinstance(g, dict) else ""
        f = f"{base}.schedulingGates[{i}].name"
        if not name or not _QUALIFIED.match(name.rpartition("/")[2]) or len(name.rpartition("/")[2]) > 63:
            errs.append(_invalid(f, name, "name part must consist of alphanumeric characters, '-', '_' or "
                                 "'.', and must start and end with an alphanumeric character"))
        elif name in seen:
            errs.append(_err("FieldValueDuplicate", f, f'Duplicate value: "{name}"'))
        seen.add(name)
    if spec.get("schedulingGates") and spec.get("nodeName"):
        errs.append(_forbidden(f"{base}.nodeName",
                               "cannot be set until all schedulingGates have been cleared"))
    return errs


def _volume_devices(spec: dict[str, Any], base: str) -> FieldErrors:
    """volumeDevices name a persistentVolumeClaim or ephemeral volume (block mode), no other kind."""
    errs: FieldErrors = []
    volumes = {v.get("name"): v for v in spec.get("volumes") or [] if isinstance(v, dict)}
    for field in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(field) or []):
            for j, d in enumerate((c or {}).get("volumeDevices") or [] if isinstance(c, dict) else []):
                name = (d or {}).get("name")
                f = f"{base}.{field}[{i}].volumeDevices[{j}].name"
                v = volumes.get(name)
                if v is None:
                    errs.append(_err("FieldValueNotFound", f, f'Not found: "{name}"'))
                elif not ("persistentVolumeClaim" in v or "ephemeral" in v):
                    errs.append(_invalid(f, name, "can only use volume source type of "
                                         "PersistentVolumeClaim or Ephemeral for block mode"))
    return errs


def _flex_volumes(spec: dict[str, Any], base: str) -> FieldErrors:
    """validateFlexVolumeSource: a flexVolume names its driver."""
    errs: FieldErrors = []
    for i, v in enumerate(spec.get("volumes") or []):
        flex = v.get("flexVolume") if isinstance(v, dict) else None
        if isinstance(flex, dict) and not flex.get("driver"):
            errs.append(_required(f"{base}.volumes[{i}].flexVolume.driver"))
    return errs


CHECKS: tuple[Callable[[dict[str, Any], str], FieldErrors], ...] = (
    _scalars, _pod_security, _os, _host_aliases, _dns, _topology_spread, _readiness_gates, _scheduling_gates,
    _volume_devices, _flex_volumes)


def validate_pod_spec(spec: dict[str, Any], base: str) -> FieldErrors:
    """Every error of these fields in a pod spec at `base` ("spec" or "spec.template.spec")."""
    errs: FieldErrors = []
    for check in CHECKS:
        errs += check(spec, base)
    for field in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(field) or []):
            if isinstance(c, dict):
                errs += _container(c, f"{base}.{field}[{i}]", field == "initContainers", spec)
    return errs


def validate_pod_create(spec: dict[str, Any]) -> FieldErrors:
    """What a new pod may not carry: ephemeral containers come only through pods/ephemeralcontainers."""
    if spec.get("ephemeralContainers"):
        return [_forbidden("spec.ephemeralContainers", "cannot be set on create")]
    return []


_EPHEMERAL_FORBIDDEN = ("ports", "resources", "lifecycle", "livenessProbe", "readinessProbe", "startupProbe",
                        "resizePolicy", "restartPolicy")


def validate_ephemeral_update(new: dict[str, Any], old: dict[str, Any]) -> FieldErrors:
    """pods/ephemeralcontainers (ValidatePodEphemeralContainersUpdate): ephemeral containers may only be
    added; each is a valid container without ports, resources, probes or lifecycle, named uniquely in the
    pod, and its targetContainerName names a container of the pod."""
    base = "spec.ephemeralContainers"
    errs: FieldErrors = []
    news = [c for c in new.get("ephemeralContainers") or [] if isinstance(c, dict)]
    by_name = {c.get("name"): c for c in news}
    for o in old.get("ephemeralContainers") or []:
        n = by_name.get(o.get("name"))
        if n is None:
            errs.append(_forbidden(base,
                                   f'existing ephemeral containers "{o.get("name")}" may not be removed\n'))
        elif n != o:
            errs.append(_forbidden(f"{base}[{o.get('name')}]",
                                   f'existing ephemeral containers "{o.get("name")}" may not be changed\n'))
    others = {c.get("name") for f in ("initContainers", "containers") for c in new.get(f) or []
              if isinstance(c, dict)}
    seen: set[str] = set()
    for i, c in enumerate(news):
        f = f"{base}[{i}]"
        name = c.get("name")
        if not name:
            errs.append(_required(f"{f}.name"))
        elif dns1123_label(str(name)):
            errs += [_invalid(f"{f}.name", name, m) for m in dns1123_label(str(name))]
        elif name in seen or name in others:
            errs.append(_err("FieldValueDuplicate", f"{f}.name", f'Duplicate value: "{name}"'))
        seen.add(name or "")
        if not c.get("image"):
            errs.append(_required(f"{f}.image"))
        for k in _EPHEMERAL_FORBIDDEN:
            if c.get(k):
                errs.append(_forbidden(f"{f}.{k}", "cannot be set for an Ephemeral Container"))
        for j, vm in enumerate(c.get("volumeMounts") or []):
            if isinstance(vm, dict) and vm.get("subPath"):
                errs.append(_forbidden(f"{f}.volumeMounts[{j}].subPath", "cannot be set for an Ephemeral "
                                       "Container"))
        target = c.get("targetContainerName")
        if target and target not in others:
            errs.append(_err("FieldValueNotFound", f"{f}.targetContainerName", f'Not found: "{target}"'))
        errs += validate_env(c, f) + _container_security(c, f)
    return errs
