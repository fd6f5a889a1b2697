"""DefaultPreemption (PostFilter): when no node fits, find nodes where evicting lower-priority pods
would make room, choose the victims minimally (PDB-violating ones reprieved first), pick the best
node (fewest PDB violations, lowest top victim priority, lowest priority sum, fewest victims,
latest start), nominate it and delete the victims gracefully.

Dry runs work on a cloned NodeInfo and a cloned CycleState (PreFilter extensions keep
InterPodAffinity / PodTopologySpread counts consistent), so the snapshot is never touched.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable
from typing import Any

from nodeagent.api.selectors import from_label_selector
from nodeagent.scheduler.framework import (
    Code,
    CycleState,
    NodeInfo,
    PodInfo,
    PostFilterResult,
    Status,
    unresolvable,
    unschedulable,
)
from nodeagent.scheduler.framework.status import reasons_summary

NAME = "DefaultPreemption"
R_NOT_HELPFUL = "Preemption is not helpful for scheduling"
R_NO_VICTIMS = "No preemption victims found for incoming pod"


@dataclasses.dataclass
class Args:
    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100


def validate(args: Args) -> list[str]:
    errs = []
    if not 0 <= args.min_candidate_nodes_percentage <= 100:
        errs.append("minCandidateNodesPercentage must be in [0, 100]")
    if args.min_candidate_nodes_absolute < 0:
        errs.append("minCandidateNodesAbsolute must be >= 0")
    if args.min_candidate_nodes_percentage == 0 and args.min_candidate_nodes_absolute == 0:
        errs.append("minCandidateNodesPercentage and minCandidateNodesAbsolute cannot both be 0")
    return errs


@dataclasses.dataclass
class Candidate:
    node: str
    victims: list[PodInfo]
    num_pdb_violations: int


@dataclasses.dataclass
class _PDB:
    namespace: str
    selector: Any
    allowed: int
    disrupted: frozenset[str]


def parse_pdbs(pdbs: list[dict[str, Any]]) -> list[_PDB]:
    out = []
    for p in pdbs:
        sel = (p.get("spec") or {}).get("selector")
        if not sel or (not sel.get("matchLabels") and not sel.get("matchExpressions")):
            continue  # a nil or empty PDB selector matches nothing
        st = p.get("status") or {}
        out.append(_PDB((p.get("metadata") or {}).get("namespace") or "default", from_label_selector(sel),
                        int(st.get("disruptionsAllowed") or 0), frozenset(st.get("disruptedPods") or {})))
    return out


def split_by_pdb(pods: list[PodInfo], pdbs: list[_PDB]) -> tuple[list[PodInfo], list[PodInfo]]:
    """(violating, non-violating), each in the given order; budgets are consumed as pods are counted."""
    allowed = [p.allowed for p in pdbs]
    violating: list[PodInfo] = []
    ok: list[PodInfo] = []
    for pod in pods:
        hit = False
        if pod.labels:
            for i, pdb in enumerate(pdbs):
                if pdb.namespace != pod.namespace or not pdb.selector.matches(pod.labels):
                    continue
                if pod.name in pdb.disrupted:
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    hit = True
        (violating if hit else ok).append(pod)
    return violating, ok


def pick_one(cands: list[Candidate]) -> Candidate:
    """kube-scheduler's pickOneNodeForPreemption: narrow by each criterion in turn (fewest PDB
    violations, lowest highest-victim priority, lowest priority sum, fewest victims, latest start
    of the highest-priority victims), the first left wins. The first four narrowings are one
    lexicographic minimum (victims are sorted most important first)."""
    if len(cands) == 1:
        return cands[0]
    floor = -(2**31)
    best_key = None
    best: list[Candidate] = []
    for c in cands:
        v = c.victims
        key = (c.num_pdb_violations, v[0].priority if v else floor,
               sum(map(_PRIORITY, v)) + len(v) * (2**31 + 1), len(v))
        if best_key is None or key < best_key:
            best_key, best = key, [c]
        elif key == best_key:
            best.append(c)
    if len(best) == 1:
        return best[0]

    def earliest_top_start(c: Candidate) -> str:
        top = c.victims[0].priority
        return min(v.start_time for v in c.victims if v.priority == top)
    starts = [earliest_top_start(c) if c.victims else "" for c in best]
    return best[starts.index(max(starts))]


class DefaultPreemption:
    name = NAME

    def __init__(self, args: Args, handle: Any):
        self.args = args
        self.handle = handle

    def eligible(self, pod: PodInfo) -> str:
        if pod.preemption_policy == "Never":
            return "not eligible due to preemptionPolicy=Never."
        nn = pod.nominated_node_name
        if nn:
            ni = self.handle.snapshot.get(nn)
            if ni is not None and any(p.deleting and p.priority < pod.priority for p in ni.pods.values()):
                return "not eligible due to a terminating pod on the nominated node."
        return ""

    def num_candidates(self, n: int) -> int:
        k = n * self.args.min_candidate_nodes_percentage // 100
        return min(max(k, self.args.min_candidate_nodes_absolute), n)

    def post_filter(self, state: CycleState, pod: PodInfo, statuses: dict[str, Status]
                    ) -> tuple[PostFilterResult | None, Status | None]:
        cands, fail = self.find_candidates(state, pod, statuses)
        if fail is not None:
            return None, fail
        return self.select(pod, cands)

    async def post_filter_async(self, state: CycleState, pod: PodInfo, statuses: dict[str, Status]
                                ) -> tuple[PostFilterResult | None, Status | None]:
        """post_filter with the scheduler's preempting extenders asked in between (callExtenders): each
        narrows the candidates and their victims; an empty answer means no preemption."""
        cands, fail = self.find_candidates(state, pod, statuses)
        if fail is not None:
            return None, fail
        kept, s = await self.handle.extenders_preemption(
            pod, {c.node: (c.victims, c.num_pdb_violations) for c in cands})
        if s is not None:
            return None, s
        if not kept:
            return None, unschedulable(NAME, "preemption: the scheduler extenders left no candidate node")
        cands = [Candidate(node, victims, nviol) for node, (victims, nviol) in kept.items()]
        for c in cands:
            by_importance(c.victims)
        return self.select(pod, cands)

    def select(self, pod: PodInfo, cands: list[Candidate]) -> tuple[PostFilterResult | None, Status | None]:
        best = pick_one(cands)
        self.handle.preempt(pod, best.node, best.victims)
        return PostFilterResult(best.node), None

    def find_candidates(self, state: CycleState, pod: PodInfo, statuses: dict[str, Status]
                        ) -> tuple[list[Candidate], Status | None]:
        """Candidate nodes with their victims (findCandidates), or why preemption cannot help."""
        why = self.eligible(pod)
        if why:
            return [], unschedulable(NAME, why)
        snap = self.handle.snapshot
        n_all = snap.num_nodes
        not_helpful = unresolvable(NAME, R_NOT_HELPFUL)
        resolvable = {s for s in set(statuses.values()) if s.code == Code.UNSCHEDULABLE}  # identity-hashed
        get = statuses.get
        potential = [ni for ni in snap.nodes if get(ni.name) in resolvable]
        dry_run_statuses: dict[str, Status] = {}

        def message() -> str:  # built only when preemption fails
            all_statuses = {ni.name: not_helpful for ni in snap.nodes if get(ni.name) not in resolvable}
            all_statuses.update(dry_run_statuses)
            return f"preemption: 0/{n_all} nodes are available: {reasons_summary(all_statuses)}."

        if not potential:
            return [], unresolvable(NAME, message())
        pdbs = parse_pdbs(self.handle.pdbs())
        want = self.num_candidates(len(potential))
        offset = self.handle.rng.randrange(len(potential))
        cands: list[Candidate] = []
        non_violating = 0
        dry = _DryRun(self.handle.framework, state)
        for i in range(len(potential)):
            ni = potential[(offset + i) % len(potential)]
            victims, nviol, s = self.select_victims(state, pod, ni, pdbs, statuses[ni.name].plugin, dry)
            if s is None and victims:
                cands.append(Candidate(ni.name, victims, nviol))
                if nviol == 0:
                    non_violating += 1
                if non_violating > 0 and len(cands) >= want:
                    break
            else:
                dry_run_statuses[ni.name] = s or unresolvable(NAME, R_NO_VICTIMS)
        if not cands:
            return [], unschedulable(NAME, message())
        return cands, None

    def select_victims(self, state: CycleState, pod: PodInfo, ni: NodeInfo, pdbs: list[_PDB],
                       failed_at: str = "",
                       dry: _DryRun | None = None) -> tuple[list[PodInfo], int, Status | None]:
        """Remove every lower-priority pod; if the pod then fits, add back as many as possible,
        most important first, PDB-protected ones before the rest.

        The what-if runs on the node itself and restores it exactly (the cycle is synchronous);
        with no PreFilter extension active, the CycleState is shared rather than cloned."""
        prio = pod.priority
        lower = [p for p in ni.pods.values() if p.priority < prio]
        if not lower:
            return [], 0, unresolvable(NAME, R_NO_VICTIMS)
        if dry is None:
            dry = _DryRun(self.handle.framework, state)
        nominated = self.handle.nominated_for(ni.name, pod)
        if dry.arithmetic(failed_at, pod, nominated, lower):
            return self._select_by_arithmetic(state, pod, ni, pdbs, dry.filters_after(failed_at),
                                              nominated, lower)
        st = dry.state_for_node()
        exts = dry.exts
        filters = dry.filters_after(failed_at)
        run_filters = dry.fw.run_filters
        for p in nominated:
            ni.add_pod(p)
        for p in lower:
            ni.remove_pod(p)
        out: list[PodInfo] = []  # pods currently off the node (restored in `finally`)
        out.extend(lower)
        try:
            for e in exts:
                for p in nominated:
                    e.add_pod(st, pod, p, ni)
                for p in lower:
                    e.remove_pod(st, pod, p, ni)
            s = run_filters(st, pod, ni, filters)
            if s is not None:
                return [], 0, s
            by_importance(lower)
            if pdbs:
                violating, rest = split_by_pdb(lower, pdbs)
            else:
                violating, rest = [], lower
            victims: list[PodInfo] = []
            nviol = 0
            for group, counts in ((violating, True), (rest, False)):
                for p in group:
                    ni.add_pod(p)
                    out.remove(p)
                    for e in exts:
                        e.add_pod(st, pod, p, ni)
                    if run_filters(st, pod, ni, filters) is None:
                        continue  # reprieved
                    ni.remove_pod(p)
                    out.append(p)
                    for e in exts:
                        e.remove_pod(st, pod, p, ni)
                    victims.append(p)
                    if counts:
                        nviol += 1
        finally:
            for p in out:
                ni.add_pod(p)
            for p in nominated:
                ni.remove_pod(p)
        if nviol and len(victims) > nviol:
            by_importance(victims)
        return victims, nviol, None

    def _select_by_arithmetic(self, state: CycleState, pod: PodInfo, ni: NodeInfo, pdbs: list[_PDB],
                              filters: list[Any], nominated: list[PodInfo], lower: list[PodInfo]
                              ) -> tuple[list[PodInfo], int, Status | None]:
        """select_victims when every filter that matters only counts resources: the same
        remove-all-then-reprieve walk, on request sums instead of NodeInfo mutations."""
        dp = len(nominated) - len(lower)
        dc = dm = de = 0
        for p in nominated:
            dc, dm, de = dc + p.req_cpu, dm + p.req_mem, de + p.req_eph
        for p in lower:
            dc, dm, de = dc - p.req_cpu, dm - p.req_mem, de - p.req_eph

        check: Callable[[int, int, int, int], Status | None]
        if len(filters) == 1:  # the common case (only NodeResourcesFit can change): a C-level partial
            check = functools.partial(filters[0].filter_with_delta, state, pod, ni)
        else:
            fwds = [f.filter_with_delta for f in filters]

            def check(dp: int, dc: int, dm: int, de: int) -> Status | None:
                for f in fwds:
                    s = f(state, pod, ni, dp, dc, dm, de)
                    if s is not None:
                        return s
                return None

        s = check(dp, dc, dm, de)
        if s is not None:
            return [], 0, s
        by_importance(lower)
        violating, rest = split_by_pdb(lower, pdbs) if pdbs else ([], lower)
        victims: list[PodInfo] = []
        nviol = 0
        for group, counts in ((violating, True), (rest, False)):
            for p in group:
                if check(dp + 1, dc + p.req_cpu, dm + p.req_mem, de + p.req_eph) is None:
                    dp, dc, dm, de = dp + 1, dc + p.req_cpu, dm + p.req_mem, de + p.req_eph  # reprieved
                    continue
                victims.append(p)
                if counts:
                    nviol += 1
        # each group was walked most important first: only a mix of both needs re-sorting
        if nviol and len(victims) > nviol:
            by_importance(victims)
        return victims, nviol, None


_START = operator.attrgetter("start_time")
_PRIORITY = operator.attrgetter("priority")


def by_importance(pods: list[PodInfo]) -> None:
    """Sort most important first: higher priority, then earlier start (two stable C-level sorts)."""
    if len(pods) > 1:
        pods.sort(key=_START)
        pods.sort(key=_PRIORITY, reverse=True)


class _DryRun:
    """What every dry run of one preemption attempt shares: extension plugins, filter lists, state."""

    def __init__(self, fw: Any, state: CycleState):
        self.fw = fw
        self.state = state
        self.exts = [p for p in fw.pre_filter_plugins
                     if hasattr(p, "add_pod") and p.name not in state.skip_filter and p.name in state]
        self.active = fw.active_filters(state)
        self._filters: dict[str, list[Any]] = {}
        self.use_arithmetic = True
        self._arith: dict[str, bool] = {}

    def arithmetic(self, failed_at: str, pod: PodInfo, nominated: list[PodInfo],
                   lower: list[PodInfo]) -> bool:
        """True when the dry run can be done on request sums: no PreFilter state to keep in step,
        every remaining filter supports filter_with_delta, and no extended resources are involved."""
        if not self.use_arithmetic or self.exts or pod.req_scalar:
            return False  # (others' extended resources matter only when the pod asks for some)
        ok = self._arith.get(failed_at)
        if ok is None:
            ok = self._arith[failed_at] = all(hasattr(f, "filter_with_delta")
                                              for f in self.filters_after(failed_at))
        return ok

    def state_for_node(self) -> CycleState:
        return self.state.clone() if self.exts else self.state

    def filters_after(self, failed_at: str) -> list[Any]:
        # node-only filters before the one that rejected this node already passed on it
        f = self._filters.get(failed_at)
        if f is None:
            f = self._filters[failed_at] = self.fw.pod_dependent(self.active, failed_at)
        return f


def new(args: Args | None, handle: Any) -> DefaultPreemption:
    return DefaultPreemption(args or Args(), handle)
