"""/metrics/cadvisor: per-cgroup metrics in cAdvisor's names and labels, read from the cgroups themselves.

cAdvisor walks the cgroup tree and labels what the runtime knows about each cgroup: every series carries
`container`, `id` (the cgroup path), `image`, `name`, `namespace` and `pod`. Here the cgroups come from
the runtime's running containers and ready sandboxes: a pod's cgroup is where the kubelet placed it
(its QoS class under the cgroup root), a container's and the sandbox's (`container="POD"`, as cAdvisor
names pause) are children named by their ids, and the root cgroup `/` stands for the machine. Counters
go through `kernel.cgroups` (v1 or v2), network counters from the pause process's network namespace
(/proc/<pid>/net/dev), the writable layer's usage from the runtime's container stats.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cri.client import RuntimeClient
from kernel.cgroups import Cgroups, Stats
from nodeagent.kubelet import resources
from nodeagent.kubelet.labels import CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL
from nodeagent.kubelet.server.exposition import Family, labels
from nodeagent.kubelet.server.stats import meminfo, node_memory, proc_cpu_ns

log = logging.getLogger("nodeagent.kubelet.server")

LABELS = ["container", "id", "image", "name", "namespace", "pod"]
_NET = ("receive_bytes", "receive_packets", "receive_errors", "receive_packets_dropped",
        "transmit_bytes", "transmit_packets", "transmit_errors", "transmit_packets_dropped")
_NET_COLUMNS = (0, 1, 2, 3, 8, 9, 10, 11)  # their columns in /proc/net/dev


@dataclass
class Cgroup:
    """One cgroup cAdvisor would report, with its labels and what was read from it."""

    path: str
    container: str = ""
    image: str = ""
    name: str = ""
    namespace: str = ""
    pod: str = ""
    start_time: float = 0.0
    stats: Stats | None = None
    network: dict[str, list[int]] | None = None  # interface → the _NET counters
    fs: tuple[str, int, int, int] | None = None  # (device, usage bytes, capacity bytes, inodes used)

    def labels(self) -> list[str]:
        return [self.container, self.path, self.image, self.name, self.namespace, self.pod]


def net_dev(pid: int | str, proc: Path = Path("/proc")) -> dict[str, list[int]]:
    """The counters of every interface but lo in the network namespace of `pid`."""
    out: dict[str, list[int]] = {}
    for line in (proc / str(pid) / "net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        v = rest.split()
        if name.strip() == "lo" or len(v) < 16:
            continue
        out[name.strip()] = [int(v[i]) for i in _NET_COLUMNS]
    return out


def machine_facts(proc: Path = Path("/proc")) -> dict[str, int]:
    """machine_* of cAdvisor: logical and physical cores, sockets, memory."""
    physical: set[tuple[str, str]] = set()
    sockets: set[str] = set()
    phys_id = core_id = ""
    with contextlib.suppress(OSError):
        for line in (proc / "cpuinfo").read_text().splitlines():
            k, _, v = line.partition(":")
            k, v = k.strip(), v.strip()
            if k == "physical id":
                phys_id = v
                sockets.add(v)
            elif k == "core id":
                core_id = v
            elif not line.strip():
                if core_id:
                    physical.add((phys_id, core_id))
                phys_id = core_id = ""
    cores = os.cpu_count() or 1
    return {"cores": cores, "physical": len(physical) or cores, "sockets": len(sockets) or 1,
            "memory": meminfo(proc).get("MemTotal", 0)}


def machine_usage() -> tuple[Stats, dict[str, list[int]]]:
    """The root cgroup's figures, as cAdvisor reports `/`: the whole machine's CPU time and memory, and the
    node's own network namespace."""
    mem = node_memory()
    net: dict[str, list[int]] = {}
    with contextlib.suppress(OSError, ValueError):
        net = net_dev("self")
    return Stats(cpu_usage_ns=proc_cpu_ns(), memory_usage=mem["usageBytes"],
                 memory_working_set=mem["workingSetBytes"], memory_rss=mem["rssBytes"],
                 page_faults=mem["pageFaults"], major_page_faults=mem["majorPageFaults"]), net


class CadvisorCollector:
    def __init__(self, cri: RuntimeClient, pods: Callable[[], dict[str, dict[str, Any]]],
                 cgroup_root: tuple[str, ...], cgroups: Callable[[], Cgroups | None]) -> None:
        self.cri = cri
        self.pods = pods
        self.cgroup_root = cgroup_root
        self.cgroups = cgroups  # the driver, found once by the caller (None: no cgroups here)

    async def collect(self) -> tuple[list[Cgroup], bool]:
        """The cgroups with their readings, and whether anything failed (container_scrape_error)."""
        from cri.proto import api_pb2 as pb

        try:
            boxes = await self.cri.list_pod_sandbox(state=pb.SANDBOX_READY)
            ctrs = await self.cri.list_containers(state=pb.CONTAINER_RUNNING)
            layers = {s.attributes.id: s.writable_layer for s in await self.cri.list_container_stats()
                      if s.HasField("writable_layer")}
        except Exception as e:
            log.warning("cadvisor metrics: the runtime's containers are unavailable: %s", e)
            return [Cgroup("/")], True
        known = self.pods()
        pod_cgroups: dict[str, Cgroup] = {}
        out = [Cgroup("/")]
        sandbox_of: dict[str, Cgroup] = {}
        for b in boxes:
            uid = b.labels.get(POD_UID_LABEL) or b.metadata.uid
            pod = known.get(uid)
            if pod is None:
                continue
            parent = resources.pod_cgroup(pod, self.cgroup_root).cgroupfs()
            ns = b.labels.get(POD_NAMESPACE_LABEL) or b.metadata.namespace
            name = b.labels.get(POD_NAME_LABEL) or b.metadata.name
            pod_cgroups[uid] = Cgroup(parent, namespace=ns, pod=name, start_time=b.created_at / 1e9)
            sandbox_of[b.id] = Cgroup(f"{parent}/{b.id}", container="POD", name=b.id, namespace=ns, pod=name,
                                      start_time=b.created_at / 1e9)
        for c in ctrs:
            pod_cg = pod_cgroups.get(c.labels.get(POD_UID_LABEL) or "")
            if pod_cg is None:
                continue
            cname = c.labels.get(CONTAINER_NAME_LABEL) or c.metadata.name
            cg = Cgroup(f"{pod_cg.path}/{c.id}", container=cname,
                        image=c.image.image or c.image_ref, name=c.id, namespace=pod_cg.namespace,
                        pod=pod_cg.pod, start_time=c.created_at / 1e9)
            layer = layers.get(c.id)
            if layer is not None:
                cg.fs = (layer.fs_id.mountpoint, layer.used_bytes.value, 0, layer.inodes_used.value)
            out.append(cg)
        out += list(pod_cgroups.values()) + list(sandbox_of.values())
        driver = self.cgroups()
        await asyncio.to_thread(_read, driver, out)
        # the pod's network is its sandbox's: cAdvisor reports it on the pod cgroup and on pause
        for pod_cg in pod_cgroups.values():
            for sb in sandbox_of.values():
                if sb.path.startswith(pod_cg.path + "/") and sb.network is not None:
                    pod_cg.network = sb.network
        return out, False


def _read(driver: Cgroups | None, cgroups: list[Cgroup]) -> None:
    """Blocking: every cgroup's counters, the sandboxes' network counters, the layers' capacity."""
    capacity: dict[str, int] = {}
    for cg in cgroups:
        if driver is not None:
            with contextlib.suppress(OSError):
                cg.stats = driver.stats(cg.path, detail=True) if cg.path != "/" else None
        if cg.container == "POD" and driver is not None:
            with contextlib.suppress(OSError, ValueError):
                pids = driver.pids(cg.path)
                if pids:
                    cg.network = net_dev(pids[0])
        if cg.fs is not None:
            dev = cg.fs[0]
            if dev not in capacity:
                try:
                    st = os.statvfs(dev)
                    capacity[dev] = st.f_blocks * st.f_frsize
                except OSError:
                    capacity[dev] = 0
            cg.fs = (dev, cg.fs[1], capacity[dev], cg.fs[3])


def families(cgroups: list[Cgroup], error: bool, machine: dict[str, int],
             root: Stats | None, root_net: dict[str, list[int]] | None) -> list[Family]:
    """cAdvisor's families: the root cgroup `/` carries the machine's totals."""
    def counter(name: str, help_: str) -> Family:
        return Family(f"{name}_total", help_, "counter")

    cpu = counter("container_cpu_usage_seconds", "Cumulative cpu time consumed in seconds.")
    user = counter("container_cpu_user_seconds", "Cumulative user cpu time consumed in seconds.")
    system = counter("container_cpu_system_seconds", "Cumulative system cpu time consumed in seconds.")
    periods = counter("container_cpu_cfs_periods", "Number of elapsed enforcement period intervals.")
    throttled = counter("container_cpu_cfs_throttled_periods", "Number of throttled period intervals.")
    throttled_s = counter("container_cpu_cfs_throttled_seconds",
                          "Total time duration the container has been throttled.")
    usage = Family("container_memory_usage_bytes", "Current memory usage in bytes, including all memory "
                                                    "regardless of when it was accessed", "gauge")
    working = Family("container_memory_working_set_bytes", "Current working set in bytes.", "gauge")
    rss = Family("container_memory_rss", "Size of RSS in bytes.", "gauge")
    cache = Family("container_memory_cache", "Number of bytes of page cache memory.", "gauge")
    faults = counter("container_memory_failures", "Cumulative count of memory allocation failures.")
    limit = Family("container_spec_memory_limit_bytes", "Memory limit for the container.", "gauge")
    procs = Family("container_processes", "Number of processes running inside the container.", "gauge")
    fs_usage = Family("container_fs_usage_bytes",
                      "Number of bytes that are consumed by the container on this filesystem.", "gauge")
    fs_limit = Family("container_fs_limit_bytes", "Number of bytes that can be consumed by the container on "
                                                  "this filesystem.", "gauge")
    fs_inodes = Family("container_fs_inodes_total", "Number of Inodes", "gauge")
    fs_reads = counter("container_fs_reads_bytes", "Cumulative count of bytes read")
    fs_writes = counter("container_fs_writes_bytes", "Cumulative count of bytes written")
    net = {k: counter(f"container_network_{k}", f"Cumulative count of {k.replace('_', ' ')}")
           for k in _NET}
    start = Family("container_start_time_seconds",
                   "Start time of the container since unix epoch in seconds.", "gauge")
    seen = Family("container_last_seen", "Last time a container was seen by the exporter", "gauge")
    now = time.time()
    for cg in cgroups:
        base = cg.labels()
        lv = labels(LABELS, base)
        st = root if cg.path == "/" else cg.stats
        network = root_net if cg.path == "/" else cg.network
        seen.add(lv, now)
        if cg.start_time:
            start.add(lv, cg.start_time)
        if st is not None:
            cpu.add(labels((*LABELS[:1], "cpu", *LABELS[1:]), (base[0], "total", *base[1:])),
                    st.cpu_usage_ns / 1e9)
            user.add(lv, st.cpu_user_ns / 1e9)
            system.add(lv, st.cpu_system_ns / 1e9)
            if st.cfs_periods:
                periods.add(lv, st.cfs_periods)
                throttled.add(lv, st.cfs_throttled_periods)
                throttled_s.add(lv, st.cfs_throttled_ns / 1e9)
            usage.add(lv, st.memory_usage)
            working.add(lv, st.memory_working_set)
            rss.add(lv, st.memory_rss)
            cache.add(lv, st.memory_cache)
            for kind, n in (("pgfault", st.page_faults - st.major_page_faults),
                            ("pgmajfault", st.major_page_faults)):
                faults.add(labels((*LABELS, "failure_type", "scope"), (*base, kind, "container")), n)
            limit.add(lv, st.memory_limit if 0 < st.memory_limit < (1 << 60) else 0)
            procs.add(lv, st.pids)
            dev = labels(("container", "device", *LABELS[1:]), (base[0], "", *base[1:]))
            fs_reads.add(dev, st.io_read_bytes)
            fs_writes.add(dev, st.io_write_bytes)
        if cg.fs is not None:
            device, used, cap, inodes = cg.fs
            dev = labels(("container", "device", *LABELS[1:]), (base[0], device, *base[1:]))
            fs_usage.add(dev, used)
            fs_limit.add(dev, cap)
            fs_inodes.add(dev, inodes)
        for iface, values in (network or {}).items():
            nv = labels((*LABELS[:4], "interface", *LABELS[4:]), (*base[:4], iface, *base[4:]))
            for k, v in zip(_NET, values, strict=True):
                net[k].add(nv, v)
    err = Family("container_scrape_error",
                 "1 if there was an error while getting container metrics, 0 otherwise", "gauge")
    err.add("", 1 if error else 0)
    machine_families = []
    for name, help_, key in (
            ("machine_cpu_cores", "Number of logical CPU cores.", "cores"),
            ("machine_cpu_physical_cores", "Number of physical CPU cores.", "physical"),
            ("machine_cpu_sockets", "Number of CPU sockets.", "sockets"),
            ("machine_memory_bytes", "Amount of memory installed on the machine.", "memory")):
        f = Family(name, help_, "gauge")
        f.add("", machine[key])
        machine_families.append(f)
    return [cpu, user, system, periods, throttled, throttled_s, usage, working, rss, cache, faults, limit,
            procs, fs_usage, fs_limit, fs_inodes, fs_reads, fs_writes, *net.values(), start, seen, err,
            *machine_families]
