"""metrics.k8s.io/v1beta1: NodeMetrics and PodMetrics, read-only, as metrics-server serves them.

Objects are the API's nodes and pods (from the watch cache) that have usage in the resource-metrics
storage: labels and selectors are theirs, `timestamp`/`window` the storage's, CPU in nanocores and
memory in bytes (as Kubernetes quantities). One that has no metrics yet is left out of a list and
NotFound for a get ("podmetrics.metrics.k8s.io \"ns/name\" not found", metrics-server's words).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from nodeagent.api.resources import Resource, builtin
from nodeagent.api.selectors import SelectorError, parse_field_selector, parse_label_selector
from nodeagent.api.times import format_duration, now_rfc3339
from nodeagent.apiserver import errors
from nodeagent.apiserver.cache import WatchCache
from nodeagent.apiserver.registry import matches
from nodeagent.apiserver.request import RequestInfo
from nodeagent.apiserver.resource_metrics import Storage, Usage

GROUP_VERSION = "metrics.k8s.io/v1beta1"
NODES = builtin("", "v1", "nodes")
PODS = builtin("", "v1", "pods")


def cpu_quantity(nanocores: int) -> str:
    """A canonical quantity of nanocores, as resource.NewScaledQuantity(n, -9).String() writes it."""
    if nanocores == 0:
        return "0"
    for suffix, size in (("", 10**9), ("m", 10**6), ("u", 10**3)):
        if nanocores % size == 0:
            return f"{nanocores // size}{suffix}"
    return f"{nanocores}n"


def memory_quantity(n: int) -> str:
    """Bytes as a BinarySI quantity ("1234Ki" when it divides evenly, else the plain number)."""
    if n == 0:
        return "0"
    for suffix, size in (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20),
                         ("Ki", 2**10)):
        if n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


def _rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _usage(u: Usage) -> dict[str, str]:
    return {"cpu": cpu_quantity(u.cpu_nanocores), "memory": memory_quantity(u.memory)}


class MetricsAPI:
    def __init__(self, storage: Storage, cache: WatchCache) -> None:
        self.storage = storage
        self.cache = cache

    def _meta(self, obj: dict[str, Any]) -> dict[str, Any]:
        m = obj["metadata"]
        out: dict[str, Any] = {"name": m["name"], "creationTimestamp": now_rfc3339()}
        if m.get("namespace"):
            out["namespace"] = m["namespace"]
        if m.get("labels"):
            out["labels"] = m["labels"]
        return out

    def node_metrics(self, node: dict[str, Any]) -> dict[str, Any] | None:
        u = self.storage.node(node["metadata"]["name"])
        if u is None:
            return None
        return {"kind": "NodeMetrics", "apiVersion": GROUP_VERSION, "metadata": self._meta(node),
                "timestamp": _rfc3339(u.ts), "window": format_duration(u.window), "usage": _usage(u)}

    def pod_metrics(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        m = pod["metadata"]
        got = self.storage.pod(m.get("namespace", ""), m["name"])
        if got is None:
            return None
        when, containers = got
        return {"kind": "PodMetrics", "apiVersion": GROUP_VERSION, "metadata": self._meta(pod),
                "timestamp": _rfc3339(when.ts), "window": format_duration(when.window),
                "containers": [{"name": name, "usage": _usage(u)} for name, u in containers]}

    async def handle(self, info: RequestInfo, query: Any) -> dict[str, Any]:
        res = info.resource
        if info.verb not in ("get", "list"):
            raise errors.method_not_allowed()
        await self.cache.wait_fresh()
        source: Resource = PODS if res.name == "pods" else NODES
        if info.verb == "get":
            name = info.name or ""
            entry = self.cache.get(source.key(info.namespace, name))
            out = None
            if entry is not None:
                out = self.pod_metrics(entry.obj) if source is PODS else self.node_metrics(entry.obj)
            if out is None:
                shown = f"{info.namespace}/{name}" if source is PODS else name
                raise errors.not_found("podmetrics" if source is PODS else "nodemetrics", shown, res.group)
            return out
        try:
            labels = parse_label_selector(query.get("labelSelector"))
            fields = parse_field_selector(query.get("fieldSelector"))
        except SelectorError as e:
            raise errors.bad_request(str(e)) from None
        for f in fields:
            if f.field not in ("metadata.name", "metadata.namespace"):
                raise errors.bad_request(f"field label not supported: {f.field}")
        entries, _ = self.cache.list(source.key_prefix(), info.namespace if source is PODS else None)
        items = []
        for entry in entries:
            if not matches(entry.obj, labels, fields):
                continue
            item = self.pod_metrics(entry.obj) if source is PODS else self.node_metrics(entry.obj)
            if item is not None:
                items.append(item)
        kind = "PodMetricsList" if source is PODS else "NodeMetricsList"
        return {"kind": kind, "apiVersion": GROUP_VERSION, "metadata": {}, "items": items}
