"""A container's environment as the kubelet builds it (kubelet_pods.go makeEnvironmentVariables, envvars.go).

Pure: the pod, the container and the objects it refers to come in, (name, value) pairs and the warnings the
kubelet reports as events come out. The order of precedence is kubelet's: `envFrom` sources first, in order;
then `env` in declaration order (a value's `$(VAR)` references expand against the variables already set and
the Service variables); then the Service variables no `env`/`envFrom` entry has set. A missing Secret,
ConfigMap or key that is not optional raises EnvError with kubelet's message: the container waits in
CreateContainerConfigError until it appears.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from nodeagent.api.env_validation import relaxed_env_var_name
from nodeagent.kubelet.expansion import expand, mapping_for
from nodeagent.kubelet.pullsecrets import Credential
from nodeagent.kubelet.volumes.payloads import VolumeSourceError, field_ref_value, resource_field_value

MASTER_SERVICE_NAMESPACE = "default"  # kubelet --master-service-namespace
MASTER_SERVICES = frozenset({"kubernetes"})


ObjectGetter = Callable[[str, str], Mapping[str, Any]]  # (namespace, name) → object, or raises EnvError


class EnvError(Exception):
    """The environment cannot be built; the message is kubelet's (`secret "x" not found`, ...)."""


class NotFound(EnvError):
    """A referenced Secret or ConfigMap does not exist (as apierrors.IsNotFound: optional refs skip it)."""


@dataclasses.dataclass(frozen=True)
class Env:
    """The container's variables in order, and the InvalidEnvironmentVariableNames warnings to record."""

    vars: list[tuple[str, str]]
    warnings: list[str]

    def as_dict(self) -> dict[str, str]:
        return dict(self.vars)


# -- Service variables -------------------------------------------------------------------------------------


def is_service_ip_set(svc: Mapping[str, Any]) -> bool:
    ip = (svc.get("spec") or {}).get("clusterIP") or ""
    return ip not in ("", "None")


def env_name(s: str) -> str:
    """makeEnvVariableName: upper case, `-` to `_` (Service names are DNS labels; a port name may start
    with a digit and keeps it)."""
    return s.replace("-", "_").upper()


def _host_port(ip: str, port: int) -> str:
    try:
        v6 = isinstance(ipaddress.ip_address(ip), ipaddress.IPv6Address)
    except ValueError:
        v6 = ":" in ip
    return f"[{ip}]:{port}" if v6 else f"{ip}:{port}"


def from_services(services: Iterable[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """envvars.FromServices: `<SVC>_SERVICE_HOST/PORT[_<NAME>]` and the docker-link `<SVC>_PORT*` set."""
    out: list[tuple[str, str]] = []
    for svc in services:
        if not is_service_ip_set(svc):
            continue
        spec = svc.get("spec") or {}
        ports = spec.get("ports") or []
        if not ports:
            continue
        ip = spec["clusterIP"]
        prefix = env_name(svc["metadata"]["name"])
        out.append((f"{prefix}_SERVICE_HOST", ip))
        out.append((f"{prefix}_SERVICE_PORT", str(int(ports[0]["port"]))))
        for p in ports:
            if p.get("name"):
                out.append((f"{prefix}_SERVICE_PORT_{env_name(p['name'])}", str(int(p["port"]))))
        for i, p in enumerate(ports):
            proto = (p.get("protocol") or "TCP")
            port = int(p["port"])
            url = f"{proto.lower()}://{_host_port(ip, port)}"
            if i == 0:
                out.append((f"{prefix}_PORT", url))
            pp = f"{prefix}_PORT_{port}_{proto.upper()}"
            out += [(pp, url), (f"{pp}_PROTO", proto.lower()), (f"{pp}_PORT", str(port)), (f"{pp}_ADDR", ip)]
    return out


def service_env(services: Iterable[Mapping[str, Any]], namespace: str, enable_service_links: bool,
                master_namespace: str = MASTER_SERVICE_NAMESPACE) -> dict[str, str]:
    """getServiceEnvVarMap: the master `kubernetes` Service always; the namespace's Services when links are
    on (a Service of that name in the pod's own namespace wins over the master one)."""
    chosen: dict[str, Mapping[str, Any]] = {}
    for svc in services:
        if not is_service_ip_set(svc):
            continue
        m = svc.get("metadata") or {}
        name, ns = m.get("name", ""), m.get("namespace", "")
        if ns == master_namespace and name in MASTER_SERVICES:
            chosen.setdefault(name, svc)
        elif ns == namespace and enable_service_links:
            chosen[name] = svc
    return dict(from_services(chosen[k] for k in sorted(chosen)))


# -- the container's environment ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PodContext:
    """What the kubelet knows beside the pod object: its IPs, the node's, and node allocatable."""

    pod_ips: tuple[str, ...] = ()
    host_ips: tuple[str, ...] = ()
    node_allocatable: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def is_env_var_name(name: str) -> bool:
    """The kubelet's check of an envFrom key (with its prefix): the relaxed rule of 1.32, where
    RelaxedEnvironmentVariableValidation is on by default — `1st` or `a:b` are taken, only '=' or a byte
    outside printable ASCII makes a key skipped."""
    return not relaxed_env_var_name(name)


def _secret_data(secret: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in (secret.get("data") or {}).items():
        try:
            out[k] = base64.b64decode(v).decode("utf-8", errors="replace")
        except (binascii.Error, ValueError):
            out[k] = ""
    out.update({k: str(v) for k, v in (secret.get("stringData") or {}).items()})
    return out


def _configmap_data(cm: Mapping[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in (cm.get("data") or {}).items()}


class _Objects:
    """Each Secret/ConfigMap read once per container build (kubelet's local `secrets`/`configMaps`)."""

    def __init__(self, get: ObjectGetter) -> None:
        self.get = get
        self.seen: dict[str, Mapping[str, Any]] = {}

    def lookup(self, namespace: str, name: str, optional: bool) -> Mapping[str, Any] | None:
        if name in self.seen:
            return self.seen[name]
        try:
            obj = self.get(namespace, name)
        except NotFound:
            if optional:
                return None
            raise
        self.seen[name] = obj
        return obj


def make_environment(pod: Mapping[str, Any], container: Mapping[str, Any], *, get_secret: ObjectGetter,
                     get_configmap: ObjectGetter, services: Mapping[str, str],
                     ctx: PodContext = PodContext()) -> Env:
    """The container's environment; `services` is `service_env(...)` for the pod."""
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    secrets, configmaps = _Objects(get_secret), _Objects(get_configmap)
    tmp: dict[str, str] = {}
    warnings: list[str] = []
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix") or ""
        if src.get("configMapRef") is not None:
            ref, kind = src["configMapRef"], "configMap"
            cm = configmaps.lookup(ns, ref.get("name", ""), bool(ref.get("optional")))
            data = _configmap_data(cm) if cm is not None else {}
        elif src.get("secretRef") is not None:
            ref, kind = src["secretRef"], "secret"
            sec = secrets.lookup(ns, ref.get("name", ""), bool(ref.get("optional")))
            data = _secret_data(sec) if sec is not None else {}
        else:
            continue
        invalid = []
        for k, v in data.items():
            key = prefix + k
            if not is_env_var_name(key):
                invalid.append(key)
                continue
            tmp[key] = v
        if invalid:
            keys = ", ".join(sorted(invalid))
            warnings.append(f"Keys [{keys}] from the EnvFrom {kind} {ns}/{ref.get('name')} were skipped "
                            "since they are considered invalid environment variable names.")
    mapping = mapping_for(tmp, services)
    for e in container.get("env") or []:
        value = e.get("value") or ""
        source = e.get("valueFrom")
        if value:
            value = expand(str(value), mapping)
        elif source:
            resolved = _value_from(source, pod, container, ns, secrets, configmaps, ctx)
            if resolved is None:
                continue  # an optional reference that is not there: the variable is not set
            value = resolved
        tmp[e["name"]] = value
    out = list(tmp.items())
    out += [(k, v) for k, v in sorted(services.items()) if k not in tmp]
    return Env(out, warnings)


def _value_from(source: Mapping[str, Any], pod: Mapping[str, Any], container: Mapping[str, Any], ns: str,
                secrets: _Objects, configmaps: _Objects, ctx: PodContext) -> str | None:
    if source.get("fieldRef") is not None:
        return field_value(pod, source["fieldRef"].get("fieldPath", ""), ctx)
    if source.get("resourceFieldRef") is not None:
        rf = dict(source["resourceFieldRef"])
        rf["containerName"] = rf.get("containerName") or container.get("name")
        try:
            return resource_field_value(pod, rf, ctx.node_allocatable)
        except VolumeSourceError as e:
            raise EnvError(str(e)) from None
    for field, objs, kind in (("configMapKeyRef", configmaps, "ConfigMap"),
                              ("secretKeyRef", secrets, "Secret")):
        ref = source.get(field)
        if ref is None:
            continue
        name, key, optional = ref.get("name", ""), ref.get("key", ""), bool(ref.get("optional"))
        obj = objs.lookup(ns, name, optional)
        if obj is None:
            return None
        data = _secret_data(obj) if kind == "Secret" else _configmap_data(obj)
        if key not in data:
            if optional:
                return None
            raise EnvError(f"couldn't find key {key} in {kind} {ns}/{name}")
        return data[key]
    return ""


def field_value(pod: Mapping[str, Any], path: str, ctx: PodContext) -> str:
    """podFieldSelectorRuntimeValue: IPs from what the kubelet knows now, the rest from the pod object."""
    pod_ips = list(ctx.pod_ips) or [ip for ip in [(pod.get("status") or {}).get("podIP", "")] if ip]
    host_ips = list(ctx.host_ips) or [ip for ip in [(pod.get("status") or {}).get("hostIP", "")] if ip]
    if path == "status.podIP":
        return pod_ips[0] if pod_ips else ""
    if path == "status.podIPs":
        return ",".join(pod_ips)
    if path == "status.hostIP":
        return host_ips[0] if host_ips else ""
    if path == "status.hostIPs":
        return ",".join(host_ips)
    try:
        return field_ref_value(pod, path)
    except VolumeSourceError as e:
        raise EnvError(str(e)) from None


class ContainerSources(Protocol):
    """Where a container start reads its environment and image credentials (secrets.PodObjects)."""

    async def environment(self, pod: Mapping[str, Any], container: Mapping[str, Any],
                          pod_ips: list[str]) -> Env: ...

    async def pull_credentials(self, pod: Mapping[str, Any],
                               image: str) -> tuple[list[Credential], list[str]]: ...


class Standalone:
    """A kubelet without an apiserver: no Services, and every Secret or ConfigMap is missing."""

    def __init__(self, host_ips: tuple[str, ...] = ()) -> None:
        self.host_ips = host_ips

    async def environment(self, pod: Mapping[str, Any], container: Mapping[str, Any],
                          pod_ips: list[str]) -> Env:
        def missing(kind: str) -> ObjectGetter:
            def get(namespace: str, name: str) -> Mapping[str, Any]:
                raise NotFound(f'{kind} "{name}" not found')
            return get
        return make_environment(pod, container, get_secret=missing("secret"),
                                get_configmap=missing("configmap"), services={},
                                ctx=PodContext(tuple(pod_ips), self.host_ips))

    async def pull_credentials(self, pod: Mapping[str, Any],
                               image: str) -> tuple[list[Credential], list[str]]:
        names = [r.get("name", "") for r in (pod.get("spec") or {}).get("imagePullSecrets") or []]
        return [], [n for n in names if n]
