"""The resource metrics behind metrics.k8s.io, kept as metrics-server keeps them (pkg/scraper, pkg/storage).

Every `resolution` seconds each node's kubelet is asked for `/metrics/resource`; the answer is decoded
into points (cumulative CPU seconds, memory working set, the time of the reading, a container's start
time). The storage keeps the last and the previous point of every node and container: CPU usage is the
rate between the two, the window their distance, memory the last working set. A node whose scrape fails
is absent from the new batch, so it (and its pods) drop out of the API until it answers again, and the
others are unaffected. A container that started within the resolution gets its start (with zero CPU)
as its previous point, so a new pod has metrics after one scrape, as metrics-server does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

log = logging.getLogger("nodeagent.apiserver.metrics")

DEFAULT_RESOLUTION = 15.0  # --metric-resolution (metrics-server's chart default)
FRESH_CONTAINER_MIN_RESOLUTION = 10.0  # metrics-server's freshContainerMinMetricsResolution
KUBELET_TIMEOUT = 10.0  # --kubelet-request-timeout


@dataclasses.dataclass(frozen=True)
class Point:
    """One reading: `cpu` cumulative core-seconds, `memory` working-set bytes, at `ts` (unix seconds)."""

    ts: float
    cpu: float
    memory: int
    start: float = 0.0


@dataclasses.dataclass
class NodeScrape:
    node: Point | None
    pods: dict[tuple[str, str], dict[str, Point]]  # (namespace, pod) → container → point


@dataclasses.dataclass(frozen=True)
class Usage:
    """What the API serves for a node or a container: CPU in nanocores, memory in bytes."""

    ts: float
    window: float
    cpu_nanocores: int
    memory: int


class DecodeError(ValueError):
    pass


def decode(text: str) -> NodeScrape:
    """/metrics/resource → the node's point and each running container's (incomplete points dropped)."""
    node_cpu: tuple[float, float] | None = None
    node_mem: int | None = None
    cpu: dict[tuple[str, str, str], tuple[float, float]] = {}
    mem: dict[tuple[str, str, str], int] = {}
    start: dict[tuple[str, str, str], float] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as e:
        raise DecodeError(f"decoding the kubelet's resource metrics: {e}") from None
    for fam in families:
        for s in fam.samples:
            key = (s.labels.get("namespace", ""), s.labels.get("pod", ""), s.labels.get("container", ""))
            ts = float(s.timestamp) if s.timestamp is not None else 0.0
            if s.name == "node_cpu_usage_seconds_total":
                node_cpu = (ts, float(s.value))
            elif s.name == "node_memory_working_set_bytes":
                node_mem = int(s.value)
            elif s.name == "container_cpu_usage_seconds_total":
                cpu[key] = (ts, float(s.value))
            elif s.name == "container_memory_working_set_bytes":
                mem[key] = int(s.value)
            elif s.name == "container_start_time_seconds":
                start[key] = float(s.value)
    node = None
    if node_cpu is not None and node_mem is not None and node_cpu[0] > 0 and node_cpu[1] > 0 and node_mem > 0:
        node = Point(node_cpu[0], node_cpu[1], node_mem)
    pods: dict[tuple[str, str], dict[str, Point]] = {}
    for key, (ts, used) in cpu.items():
        m = mem.get(key)
        if m is None or ts <= 0 or used <= 0 or m <= 0:  # metrics-server drops incomplete points
            continue
        pods.setdefault(key[:2], {})[key[2]] = Point(ts, used, m, start.get(key, 0.0))
    return NodeScrape(node, pods)


def _usage(last: Point, prev: Point) -> Usage | None:
    if last.cpu < prev.cpu or last.ts <= prev.ts:
        return None  # a counter that went back (a restart): wait for the next pair
    window = last.ts - prev.ts
    return Usage(last.ts, window, int((last.cpu - prev.cpu) / window * 1e9), last.memory)


class Storage:
    """The last two points of every node and container (metrics-server's nodeStorage and podStorage)."""

    def __init__(self, resolution: float = DEFAULT_RESOLUTION) -> None:
        self.resolution = resolution
        self.last_nodes: dict[str, Point] = {}
        self.prev_nodes: dict[str, Point] = {}
        self.last_pods: dict[tuple[str, str], dict[str, Point]] = {}
        self.prev_pods: dict[tuple[str, str], dict[str, Point]] = {}
        self.pod_node: dict[tuple[str, str], str] = {}

    def store(self, batch: dict[str, NodeScrape]) -> None:
        """Replace the last points with a new batch (nodes missing from it are dropped)."""
        last_nodes: dict[str, Point] = {}
        prev_nodes: dict[str, Point] = {}
        for name, scrape in batch.items():
            new = scrape.node
            if new is None:
                continue
            last_nodes[name] = new
            kept = self._previous(new, self.last_nodes.get(name), self.prev_nodes.get(name))
            if kept is not None:
                prev_nodes[name] = kept
        last_pods: dict[tuple[str, str], dict[str, Point]] = {}
        prev_pods: dict[tuple[str, str], dict[str, Point]] = {}
        pod_node: dict[tuple[str, str], str] = {}
        for name, scrape in batch.items():
            for pod, containers in scrape.pods.items():
                if pod in last_pods:
                    log.warning("pod %s/%s reported by two nodes; keeping %s's", *pod, pod_node[pod])
                    continue
                pod_node[pod] = name
                last_c = last_pods[pod] = {}
                prev_c = prev_pods[pod] = {}
                for cname, new in containers.items():
                    last_c[cname] = new
                    kept = self._previous(new, self.last_pods.get(pod, {}).get(cname),
                                          self.prev_pods.get(pod, {}).get(cname))
                    age = new.ts - new.start
                    if kept is not None and (not new.start or kept.ts >= new.start):
                        prev_c[cname] = kept
                    elif new.start and FRESH_CONTAINER_MIN_RESOLUTION <= age < self.resolution:
                        # a fresh container: its start with nothing used yet is the previous point
                        prev_c[cname] = Point(new.start, 0.0, new.memory, new.start)
        self.last_nodes, self.prev_nodes = last_nodes, prev_nodes
        self.last_pods, self.prev_pods, self.pod_node = last_pods, prev_pods, pod_node

    @staticmethod
    def _previous(new: Point, last: Point | None, prev: Point | None) -> Point | None:
        if last is not None and new.ts > last.ts:
            return last
        if last is not None and prev is not None and prev.ts < new.ts:
            return prev
        return None

    def node(self, name: str) -> Usage | None:
        last, prev = self.last_nodes.get(name), self.prev_nodes.get(name)
        if last is None or prev is None:
            return None
        return _usage(last, prev)

    def pod(self, namespace: str, name: str) -> tuple[Usage, list[tuple[str, Usage]]] | None:
        """(the pod's timestamp and window — its earliest container's —, each container's usage), or None
        until every container has two points."""
        last, prev = self.last_pods.get((namespace, name)), self.prev_pods.get((namespace, name))
        if not last or prev is None:
            return None
        out: list[tuple[str, Usage]] = []
        earliest: Usage | None = None
        for cname in sorted(last):
            p = prev.get(cname)
            u = _usage(last[cname], p) if p is not None else None
            if u is None:
                return None
            out.append((cname, u))
            if earliest is None or u.ts < earliest.ts:
                earliest = u
        assert earliest is not None
        return earliest, out

    def pods(self) -> Iterable[tuple[str, str]]:
        return list(self.last_pods)


Fetch = Callable[[str, str, int], Awaitable[str]]  # (node name, host, port) → the body


class KubeletFetcher:
    """GET https://<node>:<port>/metrics/resource with the apiserver's kubelet client certificate."""

    def __init__(self, ssl_ctx: Callable[[], ssl.SSLContext], timeout: float = KUBELET_TIMEOUT) -> None:
        self.ssl_ctx = ssl_ctx
        self.timeout = timeout
        self._session: Any = None

    async def __call__(self, node: str, host: str, port: int) -> str:
        import aiohttp

        if self._session is None or self._session.closed:
            ctx = await asyncio.to_thread(self.ssl_ctx)  # may make the client certificate on first use
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=ctx, limit=64),
                timeout=aiohttp.ClientTimeout(total=self.timeout))
        h = f"[{host}]" if ":" in host else host
        async with self._session.get(f"https://{h}:{port}/metrics/resource") as r:
            body = await r.text()
            if r.status != 200:
                raise OSError(f"the kubelet answered {r.status}: {body[:200]}")
            return body

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class Scraper:
    """Scrapes every node each resolution into the Storage (metrics-server's manager loop)."""

    def __init__(self, storage: Storage, nodes: Callable[[], Awaitable[list[dict[str, Any]]]],
                 address: Callable[[dict[str, Any]], tuple[str, int] | None], fetch: Fetch) -> None:
        self.storage = storage
        self.nodes = nodes
        self.address = address
        self.fetch = fetch
        self.failures: dict[str, str] = {}  # node → why its last scrape failed

    async def scrape_once(self) -> None:
        nodes = await self.nodes()

        async def one(node: dict[str, Any]) -> tuple[str, NodeScrape | None]:
            name = node["metadata"]["name"]
            addr = self.address(node)
            try:
                if addr is None:
                    raise OSError("no kubelet endpoint in its status")
                body = await self.fetch(name, addr[0], addr[1])
                return name, await asyncio.to_thread(decode, body)  # parsing a full node's text takes ms
            except Exception as e:  # one node's failure must not cost the others their metrics
                why = str(e) or type(e).__name__
                if self.failures.get(name) != why:
                    log.warning("metrics: scraping node %s failed: %s", name, why)
                self.failures[name] = why
                return name, None

        results = await asyncio.gather(*(one(n) for n in nodes))
        batch = {name: scrape for name, scrape in results if scrape is not None}
        for name in batch:
            self.failures.pop(name, None)
        self.storage.store(batch)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self.scrape_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("metrics: scrape pass failed: %s", e)
            await asyncio.sleep(max(0.0, self.storage.resolution - (loop.time() - started)))
