"""The CPU manager (kubelet pkg/kubelet/cm/cpumanager): the `none` and `static` policies.

`static`: a container of a Guaranteed pod whose cpu request is a whole number gets that many CPUs to itself,
taken from the shared pool (the default set minus `--reserved-cpus`); every other container runs on the
default set, which shrinks as exclusive CPUs are handed out. Assignments live in `cpu_manager_state` in
kubelet's format and are recovered on restart; a policy different from the checkpoint's is refused, as
kubelet refuses it. Pure bookkeeping: the kubelet applies the cpusets (at create and by
UpdateContainerResources in `reconcile`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nodeagent.api.qos import GUARANTEED, container_requests, pod_qos
from nodeagent.api.quantity import parse_quantity
from nodeagent.kubelet.cpumanager import state as st
from nodeagent.kubelet.cpumanager.cpuset import CPUSetError, Topology, format_set, parse, take_by_topology

NONE = "none"
STATIC = "static"
POLICIES = (NONE, STATIC)
STATE_FILE = "cpu_manager_state"


class CPUManagerError(ValueError):
    """The CPU manager cannot start (the kubelet exits with this message)."""


class AllocationError(Exception):
    """A pod the static policy cannot give its exclusive CPUs (admission refuses it)."""


def guaranteed_cpus(pod: Mapping[str, Any], container: Mapping[str, Any]) -> int:
    """guaranteedCPUs: the exclusive CPUs a container gets, 0 unless Guaranteed with a whole cpu request."""
    if pod_qos(pod) != GUARANTEED:
        return 0
    q = parse_quantity(container_requests(container).get("cpu", 0))
    if q <= 0 or q.denominator != 1:
        return 0
    return int(q)


def _containers(pod: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], bool]]:
    spec = pod.get("spec") or {}
    return ([(c, True) for c in spec.get("initContainers") or []]
            + [(c, False) for c in spec.get("containers") or []])


class CPUManager:
    def __init__(self, policy: str, root_dir: str | Path, topology: Topology,
                 reserved: Iterable[int] = ()) -> None:
        if policy not in POLICIES:
            raise CPUManagerError(f'unknown policy: "{policy}"')
        self.policy = policy
        self.path = Path(root_dir) / STATE_FILE
        self.topology = topology
        self.reserved = frozenset(reserved)
        if policy == STATIC:
            if not self.reserved:
                raise CPUManagerError("[cpumanager] the static policy requires systemreserved.cpu + "
                                      "kubereserved.cpu to be greater than zero")
            extra = self.reserved - topology.all()
            if extra:
                raise CPUManagerError(f'[cpumanager] reserved CPUs "{format_set(extra)}" are not online '
                                      f'(online: "{format_set(topology.all())}")')
        self.default: frozenset[int] = frozenset()
        self.assignments: dict[str, dict[str, frozenset[int]]] = {}
        self._lock = threading.Lock()  # allocate/remove run on worker threads (they write the checkpoint)

    # -- state -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Restore and validate the checkpoint (blocking file I/O), as kubelet's NewCheckpointState and the
        policy's validateState do; a mismatch is a CPUManagerError naming the file to remove."""
        try:
            cp = st.load(self.path)
        except st.StateError as e:
            raise CPUManagerError(self._restore_failed(str(e))) from None
        if cp is not None and cp.policy_name != self.policy:
            raise CPUManagerError(self._restore_failed(
                f'configured policy "{self.policy}" differs from state checkpoint policy "{cp.policy_name}"'))
        if cp is not None:
            try:
                self.default = parse(cp.default_cpu_set)
                self.assignments = {u: {c: parse(s) for c, s in cs.items()} for u, cs in cp.entries.items()}
            except CPUSetError as e:
                raise CPUManagerError(self._restore_failed(str(e))) from None
        if self.policy == STATIC:
            self._validate_static()
        self._store()

    def _restore_failed(self, why: str) -> str:
        return (f"could not restore state from checkpoint: {why}, please drain this node and delete the CPU "
                f'manager checkpoint file "{self.path}" before restarting Kubelet')

    def _validate_static(self) -> None:
        all_cpus = self.topology.all()
        if not self.default and not self.assignments:
            self.default = all_cpus
            return
        if not self.reserved <= self.default:
            raise CPUManagerError(self._restore_failed(
                f'not all reserved cpus: "{format_set(self.reserved)}" are present in defaultCpuSet: '
                f'"{format_set(self.default)}"'))
        assigned: set[int] = set()
        for uid, cs in self.assignments.items():
            for name, cpus in cs.items():
                if cpus & self.default or cpus & assigned:
                    raise CPUManagerError(self._restore_failed(
                        f'pod: {uid}, container: {name} cpuset: "{format_set(cpus)}" overlaps with '
                        f'default cpuset "{format_set(self.default)}"'))
                assigned |= cpus
        if assigned | self.default != all_cpus:
            raise CPUManagerError(self._restore_failed(
                f'current set of available CPUs "{format_set(all_cpus)}" doesn\'t match with CPUs in state '
                f'"{format_set(assigned | self.default)}"'))

    def checkpoint(self) -> st.Checkpoint:
        return st.Checkpoint(self.policy, format_set(self.default),
                             {u: {c: format_set(s) for c, s in cs.items()}
                              for u, cs in self.assignments.items()})

    def _store(self) -> None:
        st.store(self.path, self.checkpoint())

    # -- the policy ------------------------------------------------------------------------------
    def shared_pool(self) -> frozenset[int]:
        """What exclusive allocations come from: the default set without the reserved CPUs."""
        return self.default - self.reserved

    def allocate(self, pod: Mapping[str, Any]) -> bool:
        """Admit a pod: give each app container that qualifies its exclusive CPUs (idempotent). Raises
        AllocationError with kubelet's message; returns whether anything changed (blocking write)."""
        if self.policy != STATIC:
            return False
        with self._lock:
            return self._allocate(pod)

    def _allocate(self, pod: Mapping[str, Any]) -> bool:
        uid = (pod.get("metadata") or {}).get("uid", "")
        have = self.assignments.get(uid, {})
        want = [(c["name"], guaranteed_cpus(pod, c)) for c, init in _containers(pod) if not init]
        want = [(name, n) for name, n in want if n > 0]
        if not want or all(name in have for name, _ in want):
            return False
        free = self.shared_pool() | frozenset().union(*have.values())
        new: dict[str, frozenset[int]] = {}
        for name, n in want:
            try:
                new[name] = take_by_topology(self.topology, free, n)
            except CPUSetError as e:
                raise AllocationError(str(e)) from None
            free -= new[name]
        self.default = (self.default | frozenset().union(*have.values())) - frozenset().union(*new.values())
        self.assignments[uid] = new
        self._store()
        return True

    def cpuset(self, pod: Mapping[str, Any], container: Mapping[str, Any]) -> str:
        """The container's cpuset.cpus: its exclusive CPUs or the default set ("" under the none policy).
        A qualifying init container runs on the first of its pod's exclusive CPUs (kubelet reuses an init
        container's CPUs for the app containers; here the app containers' CPUs serve the init steps)."""
        if self.policy != STATIC:
            return ""
        uid = (pod.get("metadata") or {}).get("uid", "")
        mine = self.assignments.get(uid, {})
        cpus = mine.get(container["name"])
        if cpus is None:
            n = guaranteed_cpus(pod, container)
            pods_cpus = sorted(frozenset().union(*mine.values())) if mine else []
            if n and n <= len(pods_cpus):
                cpus = frozenset(pods_cpus[:n])
        return format_set(cpus if cpus is not None else self.default)

    def remove_pods(self, uids: Iterable[str]) -> bool:
        """Give the CPUs of these pods back to the default set (blocking write when anything changed)."""
        with self._lock:
            return self._remove(uids)

    def _remove(self, uids: Iterable[str]) -> bool:
        changed = False
        for uid in uids:
            cs = self.assignments.pop(uid, None)
            if cs:
                self.default |= frozenset().union(*cs.values())
                changed = True
        if changed:
            self._store()
        return changed

    def remove_stale(self, active: Iterable[str]) -> bool:
        """removeStaleState: assignments of pods no longer active."""
        keep = set(active)
        return self.remove_pods([u for u in list(self.assignments) if u not in keep])
