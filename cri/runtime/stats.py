"""ContainerStats, ListContainerStats, PodSandboxStats, ListPodSandboxStats: cgroup counters, and the
container's writable layer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cri.proto import api_pb2 as pb
from cri.runtime.core import RuntimeCore, now_ns, selected
from cri.runtime.state import ContainerRecord, SandboxRecord
from kernel.fs import dir_usage


class StatsVerbs(RuntimeCore):
    def stats_containers(self, f: pb.ContainerStatsFilter) -> Iterator[ContainerRecord]:
        """The containers ListContainerStats reports, each checked as the caller reaches it."""
        sel = dict(f.label_selector)
        for c in list(self.containers.values()):
            if not c.state.has_stats():
                continue
            if f.id and not c.id.startswith(f.id):
                continue
            if f.pod_sandbox_id and not c.sandbox_id.startswith(f.pod_sandbox_id):
                continue
            if sel and not selected(self.container_labels(c), sel):
                continue
            yield c

    def stats_sandboxes(self, f: pb.PodSandboxStatsFilter) -> Iterator[SandboxRecord]:
        """The sandboxes ListPodSandboxStats reports, each checked as the caller reaches it."""
        sel = dict(f.label_selector)
        for s in list(self.sandboxes.values()):
            if f.id and not s.id.startswith(f.id):
                continue
            if sel and not selected(self.sandbox_labels(s), sel):
                continue
            yield s

    def container_stats(self, c: ContainerRecord) -> pb.ContainerStats:
        st = pb.ContainerStats()
        _attributes(st.attributes, c.id, self.container_config(c))
        ts = now_ns()
        x = self.cgroups.stats(c.cgroup)
        st.cpu.timestamp = ts
        st.cpu.usage_core_nano_seconds.value = x.cpu_usage_ns
        st.memory.timestamp = ts
        st.memory.working_set_bytes.value = x.memory_working_set
        st.memory.usage_bytes.value = x.memory_usage
        st.memory.rss_bytes.value = x.memory_rss
        st.memory.page_faults.value = x.page_faults
        st.memory.major_page_faults.value = x.major_page_faults
        if x.memory_limit and x.memory_limit < (1 << 60):
            st.memory.available_bytes.value = max(0, x.memory_limit - x.memory_working_set)
        st.writable_layer.timestamp = ts
        st.writable_layer.fs_id.mountpoint = str(Path(c.rootfs).parent / "upper")
        used, inodes = dir_usage(Path(c.rootfs).parent / "upper")
        st.writable_layer.used_bytes.value = used
        st.writable_layer.inodes_used.value = inodes
        return st

    def sandbox_stats(self, s: SandboxRecord) -> pb.PodSandboxStats:
        st = pb.PodSandboxStats()
        _attributes(st.attributes, s.id, self.sandbox_config(s))
        ts = now_ns()
        x = self.cgroups.stats(s.pod_cgroup)
        st.linux.cpu.timestamp = ts
        st.linux.cpu.usage_core_nano_seconds.value = x.cpu_usage_ns
        st.linux.memory.timestamp = ts
        st.linux.memory.working_set_bytes.value = x.memory_working_set
        st.linux.memory.usage_bytes.value = x.memory_usage
        st.linux.memory.rss_bytes.value = x.memory_rss
        st.linux.process.timestamp = ts
        st.linux.process.process_count.value = x.pids
        for c in self.containers.values():
            if c.sandbox_id == s.id and c.state.has_stats():
                st.linux.containers.append(self.container_stats(c))
        return st


def _attributes(attrs: Any, ident: str, config: pb.ContainerConfig | pb.PodSandboxConfig) -> None:
    attrs.id = ident
    attrs.metadata.CopyFrom(config.metadata)
    attrs.labels.update(config.labels)
    attrs.annotations.update(config.annotations)


