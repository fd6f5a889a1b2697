"""The kubelet Summary API (/stats/summary, stats/v1alpha1) from /proc, cgroups and CRI stats.

Node: cpu from /proc/stat, memory from /proc/meminfo and the root memory cgroup (working set = usage
minus inactive file, as cAdvisor computes it), fs from statvfs of the kubelet root, network from
/proc/net/dev, rlimit from pid_max and the process count. Pods and containers come from the runtime's
ListPodSandboxStats/ListContainerStats; usageNanoCores is the rate between two samples, as the kubelet's
CRI stats provider computes it (the runtime only reports cumulative usage).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from cri.client import RuntimeClient, is_unimplemented
from nodeagent.kubelet.eviction.signals import memory_root
from nodeagent.kubelet.labels import CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL
from nodeagent.kubelet.volumes import stats as vstats

# pod → (volume name, stats, (namespace, claim) or None) of its mounted volumes (the volume manager's)
VolumeStats = Callable[[dict[str, Any]], list[tuple[str, dict[str, int], tuple[str, str] | None]]]

CLK_TCK = os.sysconf("SC_CLK_TCK")
MIN_RATE_WINDOW = 0.2  # seconds between two samples for a usable rate


def rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ts(ns: int) -> str:
    return rfc3339(ns / 1e9) if ns else rfc3339(time.time())


def proc_cpu_ns(proc: Path = Path("/proc")) -> int:
    """Cumulative busy CPU time of the whole machine in nanoseconds (all but idle and iowait)."""
    fields = (proc / "stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(x) for x in fields]
    busy = sum(ticks[:8]) - ticks[3] - ticks[4]  # user nice system idle iowait irq softirq steal
    return busy * 1_000_000_000 // CLK_TCK


def meminfo(proc: Path = Path("/proc")) -> dict[str, int]:
    out = {}
    for line in (proc / "meminfo").read_text().splitlines():
        k, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            out[k] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    return out


def node_memory(proc: Path = Path("/proc")) -> dict[str, int]:
    mi = meminfo(proc)
    total, avail = mi.get("MemTotal", 0), mi.get("MemAvailable", mi.get("MemFree", 0))
    usage = total - mi.get("MemFree", 0)
    inactive_file = mi.get("Inactive(file)", 0)
    rss = mi.get("AnonPages", 0)
    faults = major = 0
    root = memory_root()
    try:
        text = (root / "memory.stat").read_text() if root is not None else ""
        stat = dict(line.split() for line in text.splitlines() if line.count(" ") == 1)
        inactive_file = int(stat.get("total_inactive_file", stat.get("inactive_file", inactive_file)))
        rss = int(stat.get("total_rss", stat.get("anon", rss)))
        faults = int(stat.get("total_pgfault", stat.get("pgfault", 0)))
        major = int(stat.get("total_pgmajfault", stat.get("pgmajfault", 0)))
    except (OSError, ValueError):
        pass
    working = max(0, usage - inactive_file)
    return {"availableBytes": avail, "usageBytes": usage, "workingSetBytes": working, "rssBytes": rss,
            "pageFaults": faults, "majorPageFaults": major}


def fs_stats(path: str | os.PathLike, now: float) -> dict[str, Any]:
    return {"time": rfc3339(now), **vstats.statfs(path)}


def default_interface(proc: Path = Path("/proc")) -> str | None:
    for line in (proc / "net/route").read_text().splitlines()[1:]:
        f = line.split()
        if len(f) > 2 and f[1] == "00000000":
            return f[0]
    return None


def net_stats(now: float, proc: Path = Path("/proc")) -> dict[str, Any]:
    ifaces = []
    for line in (proc / "net/dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        v = [int(x) for x in rest.split()]
        name = name.strip()
        if name == "lo" or len(v) < 16:
            continue
        ifaces.append({"name": name, "rxBytes": v[0], "rxErrors": v[2], "txBytes": v[8], "txErrors": v[10]})
    default = default_interface(proc)
    main = next((i for i in ifaces if i["name"] == default), ifaces[0] if ifaces else {"name": ""})
    return {"time": rfc3339(now), **main, "interfaces": ifaces}


def rlimit(now: float, proc: Path = Path("/proc")) -> dict[str, Any]:
    maxpid = int((proc / "sys/kernel/pid_max").read_text())
    cur = sum(1 for d in os.listdir(proc) if d.isdigit())
    return {"time": rfc3339(now), "maxpid": maxpid, "curproc": cur}


def boot_time(proc: Path = Path("/proc")) -> float:
    for line in (proc / "stat").read_text().splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


class Rates:
    """Cumulative CPU samples per key → usageNanoCores between the last two."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, int]] = {}  # key → (timestamp ns, cumulative ns)

    def rate(self, key: str, ts_ns: int, total_ns: int) -> int | None:
        prev = self._last.get(key)
        if prev is None or ts_ns - prev[0] >= MIN_RATE_WINDOW * 1e9:
            self._last[key] = (ts_ns, total_ns)
        if prev is None or ts_ns <= prev[0] or total_ns < prev[1]:
            return None
        return int((total_ns - prev[1]) * 1e9 / (ts_ns - prev[0]))

    def has(self, key: str) -> bool:
        return key in self._last

    def forget_except(self, keys: Iterable[str]) -> None:
        keep = set(keys)
        self._last = {k: v for k, v in self._last.items() if k in keep}


def _val(msg: Any, field: str) -> int | None:
    return getattr(msg, field).value if msg.HasField(field) else None


def _cpu(rates: Rates, key: str, cpu: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"time": _ts(cpu.timestamp)}
    total = _val(cpu, "usage_core_nano_seconds")
    if total is not None:
        out["usageCoreNanoSeconds"] = total
        nano = _val(cpu, "usage_nano_cores")
        if nano is None:
            nano = rates.rate(key, cpu.timestamp or time.time_ns(), total)
        if nano is not None:
            out["usageNanoCores"] = nano
    return out


def _memory(mem: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"time": _ts(mem.timestamp)}
    for field, name in (("available_bytes", "availableBytes"), ("usage_bytes", "usageBytes"),
                        ("working_set_bytes", "workingSetBytes"), ("rss_bytes", "rssBytes"),
                        ("page_faults", "pageFaults"), ("major_page_faults", "majorPageFaults")):
        v = _val(mem, field)
        if v is not None:
            out[name] = v
    return out


def _fs(fs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"time": _ts(fs.timestamp)}
    for field, name in (("used_bytes", "usedBytes"), ("inodes_used", "inodesUsed")):
        v = _val(fs, field)
        if v is not None:
            out[name] = v
    return out


class SummaryProvider:
    """Builds the Summary; `pods()` names the pods the kubelet runs (uid → pod object) for startTime."""

    def __init__(self, node_name: str, cri: RuntimeClient, root_dir: str, log_dir: str,
                 pods: Callable[[], dict[str, dict[str, Any]]],
                 volume_stats: VolumeStats | None = None) -> None:
        self.node_name = node_name
        self.cri = cri
        self.root_dir = root_dir
        self.log_dir = log_dir
        self.pods = pods
        self.volume_stats = volume_stats
        self.rates = Rates()
        self._sandbox_stats_supported = True

    async def _runtime_stats(self) -> tuple[list[Any], list[Any]]:
        """(sandbox stats, container stats): ListPodSandboxStats when offered, containers always."""
        boxes: list[Any] = []
        if self._sandbox_stats_supported:
            try:
                boxes = await self.cri.list_pod_sandbox_stats()
            except Exception as e:
                if not is_unimplemented(e):
                    raise
                self._sandbox_stats_supported = False
        return boxes, await self.cri.list_container_stats()

    async def summary(self) -> dict[str, Any]:
        node_cpu_ns = await asyncio.to_thread(proc_cpu_ns)
        boxes, ctrs = await self._runtime_stats()
        ts = time.time_ns()
        keys = ["node"] + [f"pod/{b.attributes.id}" for b in boxes] + [f"ctr/{c.attributes.id}" for c in ctrs]
        if not all(self.rates.has(k) for k in keys):
            # the first look at something: take a second sample shortly after, so a rate exists
            self.rates.rate("node", ts, node_cpu_ns)
            for b in boxes:
                if b.HasField("linux"):
                    self.rates.rate(f"pod/{b.attributes.id}", b.linux.cpu.timestamp or ts,
                                    b.linux.cpu.usage_core_nano_seconds.value)
            for c in ctrs:
                self.rates.rate(f"ctr/{c.attributes.id}", c.cpu.timestamp or ts,
                                c.cpu.usage_core_nano_seconds.value)
            await asyncio.sleep(MIN_RATE_WINDOW + 0.05)
            node_cpu_ns = await asyncio.to_thread(proc_cpu_ns)
            boxes, ctrs = await self._runtime_stats()
            ts = time.time_ns()
        self.rates.forget_except(keys)
        node = await asyncio.to_thread(self._node, ts, node_cpu_ns)
        return {"node": node, "pods": await asyncio.to_thread(self._pods, boxes, ctrs)}

    def _node(self, ts: int, cpu_ns: int) -> dict[str, Any]:
        now = ts / 1e9
        cpu: dict[str, Any] = {"time": rfc3339(now), "usageCoreNanoSeconds": cpu_ns}
        nano = self.rates.rate("node", ts, cpu_ns)
        if nano is not None:
            cpu["usageNanoCores"] = nano
        fs = fs_stats(self.root_dir, now)
        return {"nodeName": self.node_name, "startTime": rfc3339(boot_time()), "cpu": cpu,
                "memory": {"time": rfc3339(now), **node_memory()}, "network": net_stats(now),
                "fs": fs, "runtime": {"imageFs": fs}, "rlimit": rlimit(now)}

    def _pods(self, boxes: list[Any], ctrs: list[Any]) -> list[dict[str, Any]]:
        known = self.pods()
        by_uid: dict[str, dict[str, Any]] = {}
        for b in boxes:
            labels = b.attributes.labels
            uid = labels.get(POD_UID_LABEL) or b.attributes.metadata.uid
            if not uid:
                continue
            entry = self._pod_entry(by_uid, uid, labels, known)
            if b.HasField("linux"):
                lx = b.linux
                entry["cpu"] = _cpu(self.rates, f"pod/{b.attributes.id}", lx.cpu)
                entry["memory"] = _memory(lx.memory)
                if lx.HasField("process"):
                    entry["process_stats"] = {"process_count": lx.process.process_count.value}
        for c in ctrs:
            labels = c.attributes.labels
            uid = labels.get(POD_UID_LABEL)
            if not uid:
                continue
            entry = self._pod_entry(by_uid, uid, labels, known)
            name = labels.get(CONTAINER_NAME_LABEL) or c.attributes.metadata.name
            ce: dict[str, Any] = {"name": name, "cpu": _cpu(self.rates, f"ctr/{c.attributes.id}", c.cpu),
                                  "memory": _memory(c.memory)}
            if c.HasField("writable_layer"):
                ce["rootfs"] = _fs(c.writable_layer)
            started = _container_start(known.get(uid), name)
            if started:
                ce["startTime"] = started
            entry["containers"].append(ce)
        for uid, entry in by_uid.items():
            if self.volume_stats is not None and uid in known:
                now = rfc3339(time.time())
                vols = [vstats.summary_entry(name, st, now, pvc)
                        for name, st, pvc in self.volume_stats(known[uid])]
                if vols:
                    entry["volume"] = vols
            if "cpu" not in entry and entry["containers"]:  # no sandbox stats: the pod is its containers' sum
                entry["cpu"] = _sum(entry["containers"], "cpu", ("usageCoreNanoSeconds", "usageNanoCores"))
                entry["memory"] = _sum(entry["containers"], "memory",
                                       ("usageBytes", "workingSetBytes", "rssBytes", "pageFaults",
                                        "majorPageFaults"))
            entry["containers"].sort(key=lambda c: c["name"])
        return sorted(by_uid.values(), key=lambda p: (p["podRef"]["namespace"], p["podRef"]["name"]))

    def _pod_entry(self, by_uid: dict[str, dict[str, Any]], uid: str, labels: Any,
                   known: dict[str, dict[str, Any]]) -> dict[str, Any]:
        entry = by_uid.get(uid)
        if entry is None:
            pod = known.get(uid) or {}
            m = pod.get("metadata") or {}
            entry = {"podRef": {"name": m.get("name") or labels.get(POD_NAME_LABEL, ""),
                                "namespace": m.get("namespace") or labels.get(POD_NAMESPACE_LABEL, ""),
                                "uid": uid},
                     "containers": []}
            start = (pod.get("status") or {}).get("startTime")
            if start:
                entry["startTime"] = start
            by_uid[uid] = entry
        return entry


def _container_start(pod: dict[str, Any] | None, name: str) -> str | None:
    for cs in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == name:
            return ((cs.get("state") or {}).get("running") or {}).get("startedAt")
    return None


def _sum(containers: list[dict[str, Any]], part: str, fields: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {"time": max(c[part]["time"] for c in containers)}
    for f in fields:
        vals = [c[part][f] for c in containers if f in c[part]]
        if vals:
            out[f] = sum(vals)
    return out
