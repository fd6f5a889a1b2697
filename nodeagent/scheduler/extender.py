"""Scheduler extenders (KubeSchedulerConfiguration `extenders`): HTTP webhooks that filter, prioritize and
bind, as kube-scheduler's HTTPExtender calls them.

Each call is a JSON POST to `<urlPrefix>/<verb>` with kube-scheduler's extender/v1 bodies (Go field names:
ExtenderArgs{Pod, Nodes | NodeNames}, ExtenderFilterResult{Nodes | NodeNames, FailedNodes,
FailedAndUnresolvableNodes, Error}, HostPriorityList[{Host, Score}], ExtenderBindingArgs{PodName,
PodNamespace, PodUID, Node}, ExtenderBindingResult{Error}); `nodeCacheCapable` extenders get node names,
the others whole Node objects. A `preemptVerb` extender gets DefaultPreemption's candidates
(ExtenderPreemptionArgs{Pod, NodeNameToVictims | NodeNameToMetaVictims}) and answers the nodes and
victims it agrees to (ExtenderPreemptionResult{NodeNameToMetaVictims}). An extender with
`managedResources` sees only pods that ask for one of them. A filter or preempt error fails the cycle
unless the extender is `ignorable`; a prioritize error is skipped (kube-scheduler logs it and goes on);
a bind error fails the binding.
"""

from __future__ import annotations

import dataclasses
import json
import re
import ssl
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp

from nodeagent.scheduler.framework.registry import ConfigError

MAX_EXTENDER_PRIORITY = 10
DEFAULT_HTTP_TIMEOUT = 30.0  # kube-scheduler's v1 default for httpTimeout
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class ExtenderError(Exception):
    """A call that failed (transport, HTTP status, or the extender's own `Error`)."""


def parse_duration(value: Any, field: str) -> float:
    """A metav1.Duration ("30s", "1m30s", "500ms") or a number of seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    s = str(value).strip()
    parts = _DURATION.findall(s)
    if not s or "".join(n + u for n, u in parts) != s:
        raise ConfigError(f"{field}: invalid duration {value!r}")
    return sum(float(n) * _UNIT[u] for n, u in parts)


@dataclasses.dataclass(frozen=True)
class TLSConfig:
    insecure: bool = False
    server_name: str = ""
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    ca_data: str = ""


@dataclasses.dataclass(frozen=True)
class ExtenderConfig:
    url_prefix: str
    filter_verb: str = ""
    prioritize_verb: str = ""
    preempt_verb: str = ""
    bind_verb: str = ""
    weight: int = 0
    enable_https: bool = False
    tls: TLSConfig | None = None
    http_timeout: float = DEFAULT_HTTP_TIMEOUT
    node_cache_capable: bool = False
    managed_resources: tuple[tuple[str, bool], ...] = ()  # (name, ignoredByScheduler)
    ignorable: bool = False


_KNOWN = {"urlPrefix", "filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb", "weight", "enableHTTPS",
          "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources", "ignorable"}
_TLS_KNOWN = {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"}


def parse_extenders(items: Any) -> list[ExtenderConfig]:
    """The `extenders` list, validated as kube-scheduler's ValidateExtenders does."""
    if items is None:
        return []
    if not isinstance(items, list):
        raise ConfigError("extenders: must be a list")
    out: list[ExtenderConfig] = []
    for i, e in enumerate(items):
        f = f"extenders[{i}]"
        if not isinstance(e, dict):
            raise ConfigError(f"{f}: must be an object")
        unknown = sorted(set(e) - _KNOWN)
        if unknown:
            raise ConfigError(f"{f}: unknown field(s) {', '.join(unknown)}")
        if not e.get("urlPrefix"):
            raise ConfigError(f"{f}.urlPrefix: Required value")
        weight = int(e.get("weight") or 0)
        if e.get("prioritizeVerb") and weight <= 0:
            raise ConfigError(f"{f}.weight: Invalid value: {weight}: must have a positive weight applied "
                              "to it")
        managed = []
        for j, r in enumerate(e.get("managedResources") or []):
            if not isinstance(r, dict) or not r.get("name"):
                raise ConfigError(f"{f}.managedResources[{j}].name: Required value")
            managed.append((str(r["name"]), bool(r.get("ignoredByScheduler"))))
        tls = None
        if e.get("tlsConfig") is not None:
            t = e["tlsConfig"]
            unknown = sorted(set(t) - _TLS_KNOWN)
            if unknown:
                raise ConfigError(f"{f}.tlsConfig: unknown field(s) {', '.join(unknown)}")
            if t.get("certData") or t.get("keyData"):
                raise ConfigError(f"{f}.tlsConfig: certData/keyData are not supported; use certFile/keyFile")
            tls = TLSConfig(bool(t.get("insecure")), str(t.get("serverName") or ""),
                            str(t.get("certFile") or ""), str(t.get("keyFile") or ""),
                            str(t.get("caFile") or ""), str(t.get("caData") or ""))
        timeout = parse_duration(e["httpTimeout"], f"{f}.httpTimeout") if e.get("httpTimeout") \
            else DEFAULT_HTTP_TIMEOUT
        out.append(ExtenderConfig(str(e["urlPrefix"]), str(e.get("filterVerb") or ""),
                                  str(e.get("prioritizeVerb") or ""), str(e.get("preemptVerb") or ""),
                                  str(e.get("bindVerb") or ""), weight,
                                  bool(e.get("enableHTTPS")), tls, timeout, bool(e.get("nodeCacheCapable")),
                                  tuple(managed), bool(e.get("ignorable"))))
    binders = sum(1 for x in out if x.bind_verb)
    if binders > 1:
        raise ConfigError(f"extenders: Invalid value: only one extender can implement bind, found {binders}")
    return out


def ignored_resources(extenders: Sequence[ExtenderConfig]) -> list[str]:
    """managedResources marked ignoredByScheduler: NodeResourcesFit leaves them to the extender."""
    return [name for e in extenders for name, ignored in e.managed_resources if ignored]


def _field(body: Mapping[str, Any], name: str) -> Any:
    """Go's encoding/json matches field names case-insensitively; so does this."""
    if name in body:
        return body[name]
    low = name.lower()
    return next((v for k, v in body.items() if k.lower() == low), None)


class HTTPExtender:
    """One configured extender; `close()` releases its connection pool."""

    def __init__(self, config: ExtenderConfig) -> None:
        self.config = config
        self._session: aiohttp.ClientSession | None = None

    @property
    def name(self) -> str:
        return self.config.url_prefix

    def _ssl(self) -> ssl.SSLContext | None:
        c = self.config
        if not c.enable_https and not c.url_prefix.startswith("https:"):
            return None
        t = c.tls or TLSConfig()
        ctx = ssl.create_default_context(cafile=t.ca_file or None, cadata=t.ca_data or None)
        if t.insecure:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if t.cert_file:
            ctx.load_cert_chain(t.cert_file, t.key_file or None)
        return ctx

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _post(self, verb: str, body: Any) -> Any:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.config.http_timeout),
                connector=aiohttp.TCPConnector(ssl=self._ssl() or False))
        url = self.config.url_prefix.rstrip("/") + "/" + verb
        headers = {"Content-Type": "application/json"}
        server_name = (self.config.tls.server_name if self.config.tls else "") or None
        try:
            async with self._session.post(url, data=json.dumps(body), headers=headers,
                                          server_hostname=server_name) as resp:
                text = await resp.text()
                if resp.status != 200:
                    raise ExtenderError(f"failed {verb} with extender at URL {url}, code {resp.status}")
                return json.loads(text) if text.strip() else None
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            raise ExtenderError(f"extender {url}: {e or type(e).__name__}") from None

    def is_interested(self, pod: Mapping[str, Any]) -> bool:
        """IsInterested: every pod, or with managedResources only pods requesting or limiting one."""
        managed = {n for n, _ in self.config.managed_resources}
        if not managed:
            return True
        spec = pod.get("spec") or {}
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            res = c.get("resources") or {}
            if managed & (set(res.get("requests") or {}) | set(res.get("limits") or {})):
                return True
        return False

    async def filter(self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]
                     ) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """(names that pass, failed: name -> why, failed and unresolvable: name -> why)."""
        names = [n["metadata"]["name"] for n in nodes]
        if not self.config.filter_verb:
            return names, {}, {}
        args: dict[str, Any] = {"Pod": pod}
        if self.config.node_cache_capable:
            args["NodeNames"] = names
        else:
            args["Nodes"] = {"metadata": {}, "items": list(nodes)}
        result = await self._post(self.config.filter_verb, args) or {}
        if _field(result, "Error"):
            raise ExtenderError(str(_field(result, "Error")))
        if self.config.node_cache_capable:
            passed = list(_field(result, "NodeNames") or [])
        else:
            passed = [(n.get("metadata") or {}).get("name") for n in
                      (_field(result, "Nodes") or {}).get("items") or []]
        known = set(names)
        return ([n for n in passed if n in known], dict(_field(result, "FailedNodes") or {}),
                dict(_field(result, "FailedAndUnresolvableNodes") or {}))

    async def prioritize(self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> dict[str, int]:
        """Host -> score (0..10) as the extender ranks them."""
        args: dict[str, Any] = {"Pod": pod}
        if self.config.node_cache_capable:
            args["NodeNames"] = [n["metadata"]["name"] for n in nodes]
        else:
            args["Nodes"] = {"metadata": {}, "items": list(nodes)}
        result = await self._post(self.config.prioritize_verb, args) or []
        return {str(_field(h, "Host")): int(_field(h, "Score") or 0) for h in result}

    async def process_preemption(self, pod: Mapping[str, Any],
                                 victims: Mapping[str, tuple[Sequence[Mapping[str, Any]], int]]
                                 ) -> dict[str, tuple[list[str], int]]:
        """ProcessPreemption: node -> (victim pods, PDB violations) in; node -> (victim UIDs, violations)
        out, as the extender narrows them (it always answers with MetaVictims)."""
        if self.config.node_cache_capable:
            args: dict[str, Any] = {"Pod": pod, "NodeNameToMetaVictims": {
                node: {"Pods": [{"UID": (p.get("metadata") or {}).get("uid")} for p in pods],
                       "NumPDBViolations": nviol} for node, (pods, nviol) in victims.items()}}
        else:
            args = {"Pod": pod, "NodeNameToVictims": {node: {"Pods": list(pods), "NumPDBViolations": nviol}
                                                      for node, (pods, nviol) in victims.items()}}
        result = await self._post(self.config.preempt_verb, args) or {}
        out: dict[str, tuple[list[str], int]] = {}
        for node, meta in (_field(result, "NodeNameToMetaVictims") or {}).items():
            meta = meta or {}
            uids = [str(_field(p, "UID")) for p in _field(meta, "Pods") or []]
            out[node] = (uids, int(_field(meta, "NumPDBViolations") or 0))
        return out

    async def bind(self, pod: Mapping[str, Any], node: str) -> None:
        meta = pod.get("metadata") or {}
        result = await self._post(self.config.bind_verb, {
            "PodName": meta.get("name"), "PodNamespace": meta.get("namespace"), "PodUID": meta.get("uid"),
            "Node": node}) or {}
        if _field(result, "Error"):
            raise ExtenderError(str(_field(result, "Error")))
