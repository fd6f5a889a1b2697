"""/metrics/resource: the kubelet's resource metrics (pkg/kubelet/metrics/collectors/resource_metrics.go).

What metrics-server scrapes: cumulative CPU seconds and memory working set of the node, of every pod and
of every running container, each sample stamped with the time it was read (milliseconds), plus
`scrape_error`/`resource_scrape_error` (1 when the runtime could not be asked). Containers and pods come
from one ListPodSandboxStats (each sandbox carries its containers' stats), or ListContainerStats from a
runtime without it; the node from /proc/stat and the node's memory cgroup.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from cri.client import RuntimeClient, is_unimplemented
from nodeagent.kubelet.labels import CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL
from nodeagent.kubelet.server.exposition import Family, labels
from nodeagent.kubelet.server.stats import node_memory, proc_cpu_ns

log = logging.getLogger("nodeagent.kubelet.server")

@dataclass
class Sample:
    """A cumulative CPU reading and a memory reading, each with the time (unix seconds) it was taken."""

    cpu_seconds: float | None = None
    cpu_time: float = 0.0
    memory_working_set: int | None = None
    memory_time: float = 0.0


@dataclass
class ContainerSample(Sample):
    name: str = ""
    start_time: float = 0.0  # unix seconds; 0: unknown


@dataclass
class PodSample(Sample):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    containers: list[ContainerSample] = field(default_factory=list)


@dataclass
class ResourceStats:
    node: Sample
    pods: list[PodSample]
    error: bool = False


def _start_times(pod: dict[str, Any] | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        started = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
        if started:
            try:
                when = dt.datetime.fromisoformat(started.replace("Z", "+00:00"))
                out[cs.get("name", "")] = when.timestamp()
            except ValueError:
                pass
    return out


def _container(c: Any, known: dict[str, dict[str, Any]]) -> tuple[str, ContainerSample] | None:
    labels = c.attributes.labels
    uid = labels.get(POD_UID_LABEL)
    if not uid:
        return None
    name = labels.get(CONTAINER_NAME_LABEL) or c.attributes.metadata.name
    s = ContainerSample(name=name, start_time=_start_times(known.get(uid)).get(name, 0.0))
    _read(s, c.cpu, c.memory)
    return uid, s


def _read(s: Sample, cpu: Any, memory: Any) -> None:
    """A CRI CpuUsage and MemoryUsage into `s` (a field the runtime left unset stays None)."""
    if cpu.HasField("usage_core_nano_seconds"):
        s.cpu_seconds = cpu.usage_core_nano_seconds.value / 1e9
        s.cpu_time = (cpu.timestamp or time.time_ns()) / 1e9
    if memory.HasField("working_set_bytes"):
        s.memory_working_set = memory.working_set_bytes.value
        s.memory_time = (memory.timestamp or time.time_ns()) / 1e9


class ResourceCollector:
    """Reads the runtime's stats and the node's counters into a ResourceStats."""

    def __init__(self, cri: RuntimeClient, pods: Callable[[], dict[str, dict[str, Any]]]) -> None:
        self.cri = cri
        self.pods = pods  # uid → the pod object (with the kubelet's latest status)
        self._sandbox_stats = True

    async def collect(self) -> ResourceStats:
        node = Sample()
        try:
            cpu_ns = await asyncio.to_thread(proc_cpu_ns)
            node.cpu_seconds, node.cpu_time = cpu_ns / 1e9, time.time()
            mem = await asyncio.to_thread(node_memory)
            node.memory_working_set, node.memory_time = mem["workingSetBytes"], time.time()
        except (OSError, ValueError) as e:
            log.warning("resource metrics: the node's counters are unreadable: %s", e)
        try:
            pods = await self._pods()
        except Exception as e:
            log.warning("resource metrics: the runtime's stats are unavailable: %s", e)
            return ResourceStats(node, [], error=True)
        return ResourceStats(node, pods)

    async def _pods(self) -> list[PodSample]:
        known = self.pods()
        by_uid: dict[str, PodSample] = {}

        def pod_for(uid: str, labels: Any) -> PodSample:
            p = by_uid.get(uid)
            if p is None:
                m = (known.get(uid) or {}).get("metadata") or {}
                ns = m.get("namespace") or labels.get(POD_NAMESPACE_LABEL, "")
                p = by_uid[uid] = PodSample(name=m.get("name") or labels.get(POD_NAME_LABEL, ""),
                                            namespace=ns, uid=uid)
            return p

        boxes: list[Any] | None = None
        if self._sandbox_stats:
            try:
                boxes = await self.cri.list_pod_sandbox_stats()
            except Exception as e:
                if not is_unimplemented(e):
                    raise
                self._sandbox_stats = False
        if boxes is not None:
            for b in boxes:
                if not b.HasField("linux") or not b.linux.containers:
                    continue  # a stopped sandbox: nothing runs in it
                labels = b.attributes.labels
                uid = labels.get(POD_UID_LABEL) or b.attributes.metadata.uid
                if not uid:
                    continue
                p = pod_for(uid, labels)
                lx = b.linux
                _read(p, lx.cpu, lx.memory)
                for c in lx.containers:
                    got = _container(c, known)
                    if got is not None:
                        p.containers.append(got[1])
        else:
            for c in await self.cri.list_container_stats():
                got = _container(c, known)
                if got is not None:
                    pod_for(got[0], c.attributes.labels).containers.append(got[1])
            for p in by_uid.values():  # no sandbox stats: the pod is its containers' sum
                cpus = [c for c in p.containers if c.cpu_seconds is not None]
                if cpus:
                    p.cpu_seconds = sum(c.cpu_seconds or 0.0 for c in cpus)
                    p.cpu_time = max(c.cpu_time for c in cpus)
                mems = [c for c in p.containers if c.memory_working_set is not None]
                if mems:
                    p.memory_working_set = sum(c.memory_working_set or 0 for c in mems)
                    p.memory_time = max(c.memory_time for c in mems)
        for p in by_uid.values():
            p.containers.sort(key=lambda c: c.name)
        return sorted(by_uid.values(), key=lambda p: (p.namespace, p.name))


def families(stats: ResourceStats) -> list[Family]:
    """The families in kubelet's names, help texts and label order."""
    node_cpu = Family("node_cpu_usage_seconds_total",
                      "[STABLE] Cumulative cpu time consumed by the node in core-seconds", "counter")
    node_mem = Family("node_memory_working_set_bytes",
                      "[STABLE] Current working set of the node in bytes", "gauge")
    start = Family("container_start_time_seconds", "[STABLE] Start time of the container since unix epoch in "
                                                   "seconds", "gauge")
    c_cpu = Family("container_cpu_usage_seconds_total",
                   "[STABLE] Cumulative cpu time consumed by the container in core-seconds", "counter")
    c_mem = Family("container_memory_working_set_bytes",
                   "[STABLE] Current working set of the container in bytes", "gauge")
    p_cpu = Family("pod_cpu_usage_seconds_total", "[STABLE] Cumulative cpu time consumed by the pod in "
                                                  "core-seconds", "counter")
    p_mem = Family("pod_memory_working_set_bytes", "[STABLE] Current working set of the pod in bytes",
                   "gauge")
    n = stats.node
    if n.cpu_seconds is not None:
        node_cpu.add("", n.cpu_seconds, n.cpu_time)
    if n.memory_working_set is not None:
        node_mem.add("", n.memory_working_set, n.memory_time)
    for p in stats.pods:
        for c in p.containers:
            lv = labels(("container", "namespace", "pod"), (c.name, p.namespace, p.name))
            if c.start_time > 0:
                start.add(lv, c.start_time)
            if c.cpu_seconds is not None:
                c_cpu.add(lv, c.cpu_seconds, c.cpu_time)
            if c.memory_working_set is not None:
                c_mem.add(lv, c.memory_working_set, c.memory_time)
        pv = labels(("namespace", "pod"), (p.namespace, p.name))
        if p.cpu_seconds is not None:
            p_cpu.add(pv, p.cpu_seconds, p.cpu_time)
        if p.memory_working_set is not None:
            p_mem.add(pv, p.memory_working_set, p.memory_time)
    err = Family("scrape_error",
                 "[ALPHA] 1 if there was an error while getting container metrics, 0 otherwise", "gauge")
    err.add("", 1 if stats.error else 0)
    err2 = Family("resource_scrape_error",
                  "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise", "gauge")
    err2.add("", 1 if stats.error else 0)
    return [node_cpu, node_mem, start, c_cpu, c_mem, p_cpu, p_mem, err, err2]
