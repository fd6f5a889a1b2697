"""Plugin results: a `Status` whose code tells the scheduler what to do next.

As in kube-scheduler, `None` (or a SUCCESS status) means the plugin passed; UNSCHEDULABLE
means "may fit after some cluster change" (preemption may help), UNSCHEDULABLE_AND_UNRESOLVABLE
means preemption cannot help, ERROR is an internal failure (retried with backoff), SKIP from a
PreFilter/PreScore means "don't call my Filter/Score for this pod", WAIT is Permit's "hold".
"""

from __future__ import annotations

import collections
import dataclasses
import enum


class Code(enum.IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5
    PENDING = 6


@dataclasses.dataclass(frozen=True, slots=True, eq=False)  # identity hash: plugins share instances
class Status:
    code: Code
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)

    def is_success(self) -> bool:
        return self.code == Code.SUCCESS

    def is_rejected(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.PENDING)

    def with_plugin(self, plugin: str) -> Status:
        return self if self.plugin == plugin else dataclasses.replace(self, plugin=plugin)


def unschedulable(plugin: str, *reasons: str) -> Status:
    return Status(Code.UNSCHEDULABLE, reasons, plugin)


def unresolvable(plugin: str, *reasons: str) -> Status:
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, plugin)


def error(plugin: str, reason: str) -> Status:
    return Status(Code.ERROR, (reason,), plugin)


def skip(plugin: str = "") -> Status:
    return Status(Code.SKIP, (), plugin)


def ok(s: Status | None) -> bool:
    """True for None and SUCCESS: the hot path returns None for success to avoid allocations."""
    return s is None or s.code == Code.SUCCESS


NO_NODES = "no nodes available to schedule pods"


class FitError(Exception):
    """No node fits: carries every node's rejecting status for the FailedScheduling summary."""

    def __init__(self, pod_key: str, num_all_nodes: int, node_statuses: dict[str, Status],
                 prefilter_msg: str = "", unschedulable_plugins: frozenset[str] = frozenset()):
        super().__init__(pod_key)
        self.pod_key = pod_key
        self.num_all_nodes = num_all_nodes
        self.node_statuses = node_statuses
        self.prefilter_msg = prefilter_msg
        self.postfilter_msg = ""
        self.unschedulable_plugins = unschedulable_plugins

    def __str__(self) -> str:
        if self.num_all_nodes == 0:
            return NO_NODES
        return fit_error_message(self.num_all_nodes, self.node_statuses, self.prefilter_msg,
                                 self.postfilter_msg)


def reasons_summary(statuses: dict[str, Status] | list[Status]) -> str:
    """kube-scheduler's "1 Insufficient cpu, 2 node(s) had untolerated taint {k: v}" (sorted strings)."""
    counts: dict[str, int] = {}
    # plugins reuse Status objects, so count distinct objects first (in C), then their reasons
    for s, n in collections.Counter(statuses.values() if isinstance(statuses, dict) else statuses).items():
        for r in s.reasons:
            counts[r] = counts.get(r, 0) + n
    return ", ".join(sorted(f"{n} {r}" for r, n in counts.items()))


def fit_error_message(num_all: int, statuses: dict[str, Status], prefilter_msg: str = "",
                      postfilter_msg: str = "") -> str:
    if prefilter_msg:
        msg = f"0/{num_all} nodes are available: {prefilter_msg}."
    else:
        msg = f"0/{num_all} nodes are available: {reasons_summary(statuses)}."
    if postfilter_msg:
        msg += " " + postfilter_msg
    return msg
