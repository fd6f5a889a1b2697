"""The scheduler: event handlers feeding cache and queue, the scheduling cycle
(snapshot -> PreFilter -> Filter -> extenders' filter -> [PostFilter] -> PreScore/Score + extenders'
prioritize -> select -> assume -> Reserve -> Permit) and the asynchronous binding cycle (PreBind ->
Bind, or a binder extender -> PostBind), where every failure path unreserves, forgets the assumed pod
and requeues it. One cycle runs at a time; it awaits only extender calls (none are configured by
default, and then the cycle never yields).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Coroutine
from typing import Any

from nodeagent.clock import REAL_CLOCK, Clock
from nodeagent.scheduler.api import EventSource, SchedulerAPI
from nodeagent.scheduler.cache import Cache, Snapshot
from nodeagent.scheduler.cyclememo import CycleMemo
from nodeagent.scheduler.extender import MAX_EXTENDER_PRIORITY, ExtenderError, HTTPExtender
from nodeagent.scheduler.framework.interface import MAX_NODE_SCORE, ActionType, ClusterEvent, CycleState
from nodeagent.scheduler.framework.runtime import Framework
from nodeagent.scheduler.framework.status import Code, FitError, Status
from nodeagent.scheduler.framework.types import NodeInfo, PodInfo, QueuedPodInfo, pod_uid
from nodeagent.scheduler.priority import resolve_priority
from nodeagent.scheduler.profile import SchedulerConfig, build_framework
from nodeagent.scheduler.queue import ASSIGNED_POD_DELETE, SchedulingQueue

log = logging.getLogger("nodeagent.scheduler")

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE = 5


def num_feasible_nodes_to_find(num_all: int, percentage: int) -> int:
    """kube-scheduler's adaptive percentageOfNodesToScore: 50% - nodes/125, at least 5%, at least 100
    nodes."""
    if num_all < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all
    pct = percentage
    if pct == 0:
        pct = 50 - num_all // 125
        if pct < MIN_FEASIBLE_NODES_PERCENTAGE:
            pct = MIN_FEASIBLE_NODES_PERCENTAGE
    if pct >= 100:
        return num_all
    n = num_all * pct // 100
    return max(n, MIN_FEASIBLE_NODES_TO_FIND)


class Handle:
    """What plugins may reach: the cycle's snapshot and framework, listers, the API, randomness."""

    def __init__(self, scheduler: Scheduler, api: SchedulerAPI, rng: random.Random):
        self._s = scheduler
        self.api = api
        self.rng = rng
        self.snapshot: Snapshot = scheduler.cache.snapshot()
        self.framework: Framework | None = None

    @property
    def namespace_labels(self) -> Any:
        return self.api.listers.namespace_labels()

    def pdbs(self) -> list[dict[str, Any]]:
        return self.api.listers.pdbs()

    def owner_selectors(self, pod: PodInfo) -> list[Any]:
        return self.api.listers.owner_selectors(pod.pod)

    def preempt(self, pod: PodInfo, node: str, victims: list[PodInfo]) -> None:
        self._s.preempt(pod, node, victims)

    def nominated_for(self, node: str, pod: PodInfo) -> list[PodInfo]:
        return self._s.nominated_for(node, pod)

    async def extenders_preemption(self, pod: PodInfo, victims: dict[str, tuple[list[PodInfo], int]]
                                   ) -> tuple[dict[str, tuple[list[PodInfo], int]], Status | None]:
        return await self._s.extenders_preemption(pod, victims)


class Scheduler:
    def __init__(self, config: SchedulerConfig, api: SchedulerAPI, *, clock: Clock | None = None,
                 rng: random.Random | None = None, out_of_tree: dict[str, Any] | None = None):
        self.config = config
        self.api = api
        self.clock = clock or REAL_CLOCK
        self.rng = rng or random.Random()
        self.cache = Cache(self.clock)
        self.handle = Handle(self, api, self.rng)
        self.extenders = [HTTPExtender(c) for c in config.extenders]
        self._preempting = any(c.preempt_verb for c in config.extenders)
        self.frameworks: dict[str, Framework] = {
            p.scheduler_name: build_framework(p, self.handle, out_of_tree) for p in config.profiles}
        self.percentages = {p.scheduler_name: (p.percentage_of_nodes_to_score
                                               if p.percentage_of_nodes_to_score is not None
                                               else config.percentage_of_nodes_to_score)
                            for p in config.profiles}
        first = next(iter(self.frameworks.values()))
        events: dict[str, list[Any]] = {}
        for fw in self.frameworks.values():
            for k, v in fw.events_to_register().items():
                events.setdefault(k, []).extend(v)
        self.queue = SchedulingQueue(
            first.queue_sort.sort_key, self._pre_enqueue, events, self.clock,
            config.pod_initial_backoff_seconds, config.pod_max_backoff_seconds,
            config.pod_max_in_unschedulable_seconds)
        self.next_start_node_index = 0
        self.memos = {name: CycleMemo(self.cache) for name in self.frameworks}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._tg: asyncio.TaskGroup | None = None
        self.stats = {"scheduled": 0, "attempts": 0, "unschedulable": 0, "errors": 0, "preemptions": 0}
        self._bound_waiters: list[tuple[int, asyncio.Future[None]]] = []

    # -- event handlers (the informers call these) ---------------------------------------------------

    def _pod_info(self, pod: dict[str, Any]) -> PodInfo:
        p = PodInfo(pod)
        spec = pod.get("spec") or {}
        if spec.get("priority") is None:
            prio, policy = resolve_priority(pod, self.api.listers.priority_classes())
            p.priority = prio
            if policy and not spec.get("preemptionPolicy"):
                p.preemption_policy = policy
        return p

    def _pre_enqueue(self, p: PodInfo) -> Status | None:
        fw = self.frameworks.get(p.scheduler_name)
        return fw.run_pre_enqueue(p) if fw else None

    def _responsible(self, pod: dict[str, Any]) -> bool:
        return ((pod.get("spec") or {}).get("schedulerName") or "default-scheduler") in self.frameworks

    @staticmethod
    def _terminal(pod: dict[str, Any]) -> bool:
        return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")

    def on_add(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "Node":
            self.cache.add_node(obj)
            self.queue.move_all_to_active_or_backoff(ClusterEvent("Node", ActionType.ADD), None, obj)
        elif kind == "Pod":
            if (obj.get("spec") or {}).get("nodeName"):
                if not self._terminal(obj):
                    p = self.cache.add_pod(obj)
                    self.queue.delete_nominated(p.uid)
                    self.queue.move_all_to_active_or_backoff(ClusterEvent("Pod", ActionType.ADD), None, obj,
                                                             pred=lambda qp: _affinity_related(qp, p))
            elif self._responsible(obj) and not self._terminal(obj):
                pi = self._pod_info(obj)
                self.queue.add(pi)
                if pi.nominated_node_name:  # nominated by an earlier run (or another replica)
                    self.queue.add_nominated(pi, pi.nominated_node_name)
        else:
            self._other_event(kind, ActionType.ADD, None, obj)

    def on_update(self, kind: str, old: dict[str, Any], new: dict[str, Any]) -> None:
        if kind == "Node":
            self.cache.update_node(new)
            act = node_update_actions(old, new)
            if act:
                self.queue.move_all_to_active_or_backoff(ClusterEvent("Node", act), old, new)
        elif kind == "Pod":
            assigned = bool((new.get("spec") or {}).get("nodeName"))
            if assigned:
                was_assigned = bool((old.get("spec") or {}).get("nodeName"))
                if self._terminal(new):
                    return self.on_delete("Pod", new)
                if not was_assigned:
                    self.queue.delete(pod_uid(new))
                p = self.cache.update_pod(new) if was_assigned else self.cache.add_pod(new)
                if was_assigned \
                        and old.get("metadata", {}).get("labels") != new.get("metadata", {}).get("labels"):
                    self.queue.move_all_to_active_or_backoff(
                        ClusterEvent("Pod", ActionType.UPDATE_POD_LABEL), old, new,
                        pred=lambda qp: _affinity_related(qp, p))
                if was_assigned and _scaled_down(old, new):
                    self.queue.move_all_to_active_or_backoff(
                        ClusterEvent("Pod", ActionType.UPDATE_POD_SCALE_DOWN), old, new)
            elif self._responsible(new):
                if self._terminal(new) or (new.get("metadata") or {}).get("deletionTimestamp"):
                    self.queue.delete(pod_uid(new))
                else:
                    pi = self._pod_info(new)
                    self.queue.update(pi)
                    if pi.nominated_node_name:
                        self.queue.add_nominated(pi, pi.nominated_node_name)
        else:
            self._other_event(kind, ActionType.UPDATE, old, new)

    def on_delete(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "Node":
            self.cache.remove_node(obj["metadata"]["name"])
        elif kind == "Pod":
            uid = pod_uid(obj)
            if (obj.get("spec") or {}).get("nodeName") or self.cache.get_pod(uid):
                self.cache.remove_pod(obj)
                self.queue.move_all_to_active_or_backoff(ASSIGNED_POD_DELETE, obj, None)
            self.queue.delete(uid)
            fw_waiting = [fw for fw in self.frameworks.values() if uid in fw.waiting]
            for fw in fw_waiting:
                fw.allow_waiting_pod(uid, Status(Code.UNSCHEDULABLE, ("pod deleted",)))
        else:
            self._other_event(kind, ActionType.DELETE, obj, None)

    def _other_event(self, kind: str, action: ActionType, old: Any, new: Any) -> None:
        self.queue.move_all_to_active_or_backoff(ClusterEvent(kind, action), old, new)

    # -- the scheduling cycle ------------------------------------------------------------------------

    async def schedule_one(self, qp: QueuedPodInfo) -> None:
        """One scheduling cycle; starts the pod's binding cycle as a task."""
        pi = qp.pod_info
        fw = self.frameworks.get(pi.scheduler_name)
        if fw is None or pi.deleting or self.cache.is_assumed(pi.uid):
            self.queue.done(pi.uid)
            return
        self.stats["attempts"] += 1
        cycle = self.queue.scheduling_cycle
        state = CycleState()
        h = self.handle
        h.framework = fw
        h.snapshot = snap = self.cache.snapshot()
        try:
            node_name = await self.schedule_pod(fw, state, pi, snap)
        except FitError as fe:
            nominated = ""
            if fw.post_filter_plugins and fe.num_all_nodes:
                res, st = await fw.run_post_filter(state, pi, fe.node_statuses, call_out=self._preempting)
                if res is not None and res.nominated_node_name:
                    nominated = res.nominated_node_name
                elif st is not None and st.reasons:
                    fe.postfilter_msg = st.message
            self.stats["unschedulable"] += 1
            qp.unschedulable_plugins = set(fe.unschedulable_plugins)
            self.handle_failure(qp, str(fe), "Unschedulable", cycle, nominated=nominated)
            return
        except Exception as e:  # a plugin bug must not stop the scheduler: back off and report
            log.exception("scheduling %s", pi.key)
            self.stats["errors"] += 1
            qp.unschedulable_plugins = set()
            self.handle_failure(qp, f"running scheduling cycle: {e}", "SchedulerError", cycle, backoff=True)
            return
        assumed = pi.with_node(node_name)
        self.cache.assume_pod(assumed)
        s = fw.run_reserve(state, assumed, node_name)
        if s is not None and not s.is_success():
            fw.run_unreserve(state, assumed, node_name)
            self.cache.forget_pod(assumed)
            qp.unschedulable_plugins = {s.plugin} if s.is_rejected() else set()
            self.handle_failure(qp, s.message,
                                "Unschedulable" if s.is_rejected() else "SchedulerError", cycle,
                                backoff=not s.is_rejected())
            return
        s, wait = fw.run_permit(state, assumed, node_name)
        if s is not None and s.code != Code.WAIT:
            fw.run_unreserve(state, assumed, node_name)
            self.cache.forget_pod(assumed)
            qp.unschedulable_plugins = {s.plugin} if s.is_rejected() else set()
            self.handle_failure(qp, s.message, "Unschedulable", cycle, backoff=not s.is_rejected())
            return
        if pi.nominated_node_name:
            self.queue.delete_nominated(pi.uid)
        self.spawn(self.binding_cycle(fw, state, qp, assumed, node_name, wait, cycle))

    async def schedule_pod(self, fw: Framework, state: CycleState, pi: PodInfo, snap: Snapshot) -> str:
        nodes = snap.nodes
        if not nodes:
            raise FitError(pi.key, 0, {}, "no nodes")
        feasible, statuses, positions = self.find_nodes_that_fit(fw, state, pi, snap)
        if feasible and self.extenders:
            feasible = await self.filter_by_extenders(pi, feasible, statuses)
        if not feasible:
            plugins = frozenset(s.plugin for s in set(statuses.values()) if s.plugin)
            raise FitError(pi.key, snap.num_nodes, statuses, "", plugins)
        if len(feasible) == 1:
            return feasible[0].name
        s = fw.run_pre_score(state, pi, feasible)
        if s is not None:
            raise RuntimeError(f"PreScore {s.plugin}: {s.message}")
        scores = None
        if positions is not None:  # the nodes came from the cycle memo: so may their totals
            scores = self.memos[fw.profile_name].totals(fw, state, pi, feasible, positions)
        if scores is None:
            scores = fw.run_score(state, pi, feasible)
        if self.extenders:
            scores = await self.add_extender_scores(pi, feasible, scores)
        return self.select_host(feasible, scores)

    async def filter_by_extenders(self, pi: PodInfo, feasible: list[NodeInfo],
                                  statuses: dict[str, Status]) -> list[NodeInfo]:
        """findNodesThatPassExtenders: each interested extender narrows the feasible nodes in turn; its
        failures become the nodes' statuses (unresolvable ones win); an error fails the cycle unless the
        extender is ignorable."""
        for ext in self.extenders:
            if not feasible:
                break
            if not ext.is_interested(pi.pod):
                continue
            try:
                passed, failed, unresolvable = await ext.filter(pi.pod, [n.node for n in feasible])
            except ExtenderError as e:
                if ext.config.ignorable:
                    log.warning("skipping ignorable extender %s: %s", ext.name, e)
                    continue
                raise
            for node, why in unresolvable.items():
                statuses[node] = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (why,))
            for node, why in failed.items():
                if node not in unresolvable:
                    statuses[node] = Status(Code.UNSCHEDULABLE, (why,))
            keep = set(passed)
            feasible = [n for n in feasible if n.name in keep]
        return feasible

    async def add_extender_scores(self, pi: PodInfo, nodes: list[NodeInfo], scores: list[int]) -> list[int]:
        """prioritizeNodes' extender part: each score times the extender's weight, scaled from the
        extenders' 0..10 to the plugins' 0..100; a failing extender is skipped, as kube-scheduler does."""
        combined: dict[str, int] = {}
        for ext in self.extenders:
            if not ext.config.prioritize_verb or not ext.is_interested(pi.pod):
                continue
            try:
                got = await ext.prioritize(pi.pod, [n.node for n in nodes])
            except ExtenderError as e:
                log.warning("extender %s prioritize failed, its scores are left out: %s", ext.name, e)
                continue
            for host, score in got.items():
                combined[host] = combined.get(host, 0) + score * ext.config.weight
        scale = MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY
        return [s + combined.get(n.name, 0) * scale for n, s in zip(nodes, scores, strict=True)]

    async def extenders_preemption(self, pi: PodInfo, victims: dict[str, tuple[list[PodInfo], int]]
                                   ) -> tuple[dict[str, tuple[list[PodInfo], int]], Status | None]:
        """callExtenders: each preempting extender interested in the pod narrows node -> (victims, PDB
        violations); an error fails preemption unless the extender is ignorable, and every node it names
        must keep at least one victim that is really on that node."""
        snap = self.handle.snapshot
        for ext in self.extenders:
            if not ext.config.preempt_verb or not ext.is_interested(pi.pod):
                continue
            try:
                got = await ext.process_preemption(
                    pi.pod, {n: ([v.pod for v in vs], k) for n, (vs, k) in victims.items()})
            except ExtenderError as e:
                if ext.config.ignorable:
                    log.warning("skipping ignorable extender %s: %s", ext.name, e)
                    continue
                return {}, Status(Code.ERROR, (str(e),))
            narrowed: dict[str, tuple[list[PodInfo], int]] = {}
            for node, (uids, nviol) in got.items():
                if not uids:
                    if ext.config.ignorable:
                        continue
                    return {}, Status(Code.ERROR, (f'expected at least one victim pod on node "{node}"',))
                ni = snap.get(node)
                pods = {p.uid: p for p in ni.pods.values()} if ni is not None else {}
                missing = [u for u in uids if u not in pods]
                if missing:
                    return {}, Status(Code.ERROR, (f"extender {ext.name} claims to preempt pod (UID: "
                                                   f"{missing[0]}) on node: {node}, but the pod is not found "
                                                   "on that node",))
                narrowed[node] = ([pods[u] for u in uids], nviol)
            victims = narrowed
            if not victims:
                break
        return victims, None

    def _binder_extender(self, pi: PodInfo) -> HTTPExtender | None:
        return next((e for e in self.extenders if e.config.bind_verb and e.is_interested(pi.pod)), None)

    def find_nodes_that_fit(self, fw: Framework, state: CycleState, pi: PodInfo, snap: Snapshot
                            ) -> tuple[list[NodeInfo], dict[str, Status], list[int] | None]:
        """The feasible nodes from the rotating start index, the rejected nodes' statuses, and the
        feasible nodes' positions in the snapshot when the cycle memo found them (statuses empty then)."""
        pre_res, s = fw.run_pre_filter(state, pi)
        if s is not None:
            if not s.is_rejected():
                raise RuntimeError(f"PreFilter {s.plugin}: {s.message}")
            fe = FitError(pi.key, snap.num_nodes, {n.name: s for n in snap.nodes}, s.message,
                          frozenset({s.plugin}))
            raise fe
        filters = fw.active_filters(state)
        statuses: dict[str, Status] = {}
        nominated = self.queue.nominated
        if not pi.nominated_node_name and not self.extenders and snap.nodes \
                and (pre_res is None or pre_res.node_names is None):
            n_all = len(snap.nodes)
            want = num_feasible_nodes_to_find(n_all, self.percentages.get(fw.profile_name, 0))
            start = self.next_start_node_index % n_all
            passes = None
            if nominated:
                deps = fw.pod_dependent(filters, None)
                sums = self._arith_ok(fw, state, pi, deps)

                def passes(n: NodeInfo) -> bool:
                    return self._fits_with_nominated(fw, state, pi, n, filters, statuses, deps, sums)
            got = self.memos[fw.profile_name].find_feasible(fw, state, pi, snap, filters, want, start,
                                                            nominated, passes)
            if got is not None and got[0]:  # none feasible: the general walk below records why
                self.next_start_node_index = (start + got[2]) % n_all
                return got[0], statuses, got[1]
        # a pod nominated by an earlier preemption tries its node first
        if pi.nominated_node_name:
            ni = snap.get(pi.nominated_node_name)
            if ni is not None and (pre_res is None or pre_res.node_names is None
                                   or ni.name in pre_res.node_names):
                ok_nodes = fw.filter_chunk(state, pi, [ni], filters, {})
                if ok_nodes and self._fits_with_nominated(fw, state, pi, ni, filters):
                    return ok_nodes, statuses, None
        if pre_res is not None and pre_res.node_names is not None:
            allowed = pre_res.node_names
            candidates = [n for n in snap.nodes if n.name in allowed]
            excluded = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                              ("node(s) didn't satisfy plugin(s) [" + " ".join(pre_res.plugins) + "]",),
                              pre_res.plugins[0] if pre_res.plugins else "")
            for n in snap.nodes:
                if n.name not in allowed:
                    statuses[n.name] = excluded
        else:
            candidates = snap.nodes
        n_all = len(candidates)
        if not n_all:
            return [], statuses, None
        want = num_feasible_nodes_to_find(n_all, self.percentages.get(fw.profile_name, 0))
        start = self.next_start_node_index % n_all
        feasible: list[NodeInfo] = []
        processed = 0
        pos = start
        dep: list[Any] | None = None
        arith = False
        while processed < n_all and len(feasible) < want:
            size = min(want - len(feasible), n_all - processed)
            end = pos + size
            chunk = candidates[pos:end] if end <= n_all else candidates[pos:] + candidates[:end - n_all]
            pos = end % n_all
            processed += size
            ok = fw.filter_chunk(state, pi, chunk, filters, statuses)
            if nominated and ok:
                if dep is None:
                    dep = fw.pod_dependent(filters, None)
                    arith = self._arith_ok(fw, state, pi, dep)
                ok = [n for n in ok if n.name not in nominated
                      or self._fits_with_nominated(fw, state, pi, n, filters, statuses, dep, arith)]
            feasible.extend(ok)
        self.next_start_node_index = (start + processed) % n_all
        return feasible, statuses, None

    def _fits_with_nominated(self, fw: Framework, state: CycleState, pi: PodInfo, ni: NodeInfo,
                             filters: list[Any], statuses: dict[str, Status] | None = None,
                             dep: list[Any] | None = None, arith: bool | None = None) -> bool:
        """Filters must also pass with the node's higher-or-equal-priority nominated pods placed.

        `dep` (the pod-dependent filters) and `arith` (whether they can be evaluated on request
        sums) are per-cycle constants the caller may pass in to save recomputing them per node."""
        others = self.nominated_for(ni.name, pi)
        if not others:
            return True
        if dep is None:
            dep = fw.pod_dependent(filters, None)
        if arith is None:
            arith = self._arith_ok(fw, state, pi, dep)
        s: Status | None = None
        if arith:
            # only resource filters can change: the nominated pods as deltas, no NodeInfo changes
            dp, dc, dm, de = len(others), 0, 0, 0
            for p in others:
                dc, dm, de = dc + p.req_cpu, dm + p.req_mem, de + p.req_eph
            for f in dep:
                s = f.filter_with_delta(state, pi, ni, dp, dc, dm, de)
                if s is not None:
                    break
        else:
            st = fw.what_if_state(state)
            # the node already passed every filter; only pod-dependent ones can change. The what-if
            # runs on the node itself: the cycle is synchronous, so nobody else sees it.
            for p in others:
                ni.add_pod(p)
            try:
                if fw.ext_plugins:
                    for p in others:
                        fw.run_pre_filter_add_pod(st, pi, p, ni)
                s = fw.run_filters(st, pi, ni, dep)
            finally:
                for p in others:
                    ni.remove_pod(p)
        if s is not None and statuses is not None:
            statuses[ni.name] = s
        return s is None

    @staticmethod
    def _arith_ok(fw: Framework, state: CycleState, pi: PodInfo, dep: list[Any]) -> bool:
        """True when nominated-pod what-ifs can run on request sums: no PreFilter extension state
        to keep in step, no extended resources asked for, every pod-dependent filter has a delta form."""
        return (not pi.req_scalar and fw.what_if_state(state) is state
                and all(hasattr(f, "filter_with_delta") for f in dep))

    def nominated_for(self, node: str, pi: PodInfo) -> list[PodInfo]:
        """Pods nominated to `node` that `pi` must leave room for (priority >= its own)."""
        pods = self.queue.nominated.get(node)
        if not pods:
            return []
        return [p for p in pods.values() if p.uid != pi.uid and p.priority >= pi.priority]

    def select_host(self, nodes: list[NodeInfo], scores: list[int]) -> str:
        """The best score; ties broken uniformly at random (kube-scheduler samples the same distribution)."""
        best = max(scores)
        n_ties = scores.count(best)
        i = scores.index(best)
        if n_ties > 1:  # the k-th of the ties, found by C-level index() calls, not a Python pass per node
            for _ in range(self.rng.randrange(n_ties)):
                i = scores.index(best, i + 1)
        return nodes[i].name

    # -- binding cycle -------------------------------------------------------------------------------

    async def binding_cycle(self, fw: Framework, state: CycleState, qp: QueuedPodInfo, assumed: PodInfo,
                            node_name: str, wait: float, cycle: int) -> None:
        try:
            s: Status | None = None
            if wait > 0:
                s = await fw.wait_on_permit(assumed, wait)
            if s is None:
                s = await fw.run_pre_bind(state, assumed, node_name)
            if s is None:
                binder = self._binder_extender(assumed)
                if binder is not None:
                    try:
                        await binder.bind(assumed.pod, node_name)
                    except ExtenderError as e:
                        s = Status(Code.ERROR, (str(e),))
                else:
                    s = await fw.run_bind(state, assumed, node_name)
            if s is not None:
                fw.run_unreserve(state, assumed, node_name)
                self.cache.forget_pod(assumed)
                self.queue.move_all_to_active_or_backoff(ASSIGNED_POD_DELETE)
                qp.unschedulable_plugins = {s.plugin} if s.is_rejected() and s.plugin else set()
                self.stats["errors"] += 1
                self.handle_failure(qp, f"Binding rejected: {s.message}", "SchedulerError", cycle,
                                    backoff=not s.is_rejected())
                return
            self.cache.finish_binding(assumed.uid)
            fw.run_post_bind(state, assumed, node_name)
            self.queue.done(assumed.uid)
            self.stats["scheduled"] += 1
            self._notify_bound()
            await self.api.recorder.event(assumed.pod, "Normal", "Scheduled",
                                          f"Successfully assigned {assumed.key} to {node_name}")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.exception("binding %s", assumed.key)
            if self.cache.is_assumed(assumed.uid):
                self.cache.forget_pod(assumed)
            self.handle_failure(qp, f"binding: {e}", "SchedulerError", cycle, backoff=True)

    # -- failures and preemption ---------------------------------------------------------------------

    def handle_failure(self, qp: QueuedPodInfo, message: str, reason: str, cycle: int, *,
                       backoff: bool = False, nominated: str = "") -> None:
        pi = qp.pod_info
        if nominated:
            self.queue.add_nominated(pi, nominated)
        self.queue.add_unschedulable_if_not_present(qp, cycle, backoff=backoff)
        cond = {"type": "PodScheduled", "status": "False", "reason": reason, "message": message}
        api = self.api
        self.spawn(api.recorder.event(pi.pod, "Warning", "FailedScheduling", message))
        self.spawn(api.patcher.patch_status(pi.namespace, pi.name, condition=cond,
                                            nominated_node_name=nominated or None))

    def preempt(self, pod: PodInfo, node: str, victims: list[PodInfo]) -> None:
        """Delete the victims gracefully and clear lower-priority nominations on the node."""
        self.stats["preemptions"] += 1
        for v in victims:
            for fw in self.frameworks.values():
                if fw.allow_waiting_pod(v.uid, Status(Code.UNSCHEDULABLE, ("preempted",))):
                    break
            else:
                self.spawn(self.api.deleter.delete(v.namespace, v.name, v.uid))
            self.spawn(self.api.recorder.event(v.pod, "Normal", "Preempted",
                                               f"Preempted by pod {pod.uid} on node {node}"))
        for p in self.queue.nominated_pods_for_node(node):
            if p.priority < pod.priority and p.uid != pod.uid:
                self.queue.delete_nominated(p.uid)
                p.nominated_node_name = ""
                self.queue.activate([p.uid])
                self.spawn(self.api.patcher.patch_status(p.namespace, p.name, nominated_node_name=""))

    # -- running -------------------------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Start an API call or binding cycle owned by the scheduler's TaskGroup (or tracked set);
        a failed API call is logged, never fatal to the scheduler."""
        wrapped = _logged(coro)
        if self._tg is not None:
            t = self._tg.create_task(wrapped)
        else:
            t = asyncio.get_running_loop().create_task(wrapped)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def _notify_bound(self) -> None:
        n = self.stats["scheduled"]
        keep = []
        for target, fut in self._bound_waiters:
            if n >= target and not fut.done():
                fut.set_result(None)
            elif not fut.done():
                keep.append((target, fut))
        self._bound_waiters = keep

    async def wait_scheduled(self, count: int) -> None:
        """Until `count` pods in total have been bound (for tests and benchmarks)."""
        if self.stats["scheduled"] >= count:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._bound_waiters.append((count, fut))
        await fut

    async def run(self, ready: asyncio.Event | None = None, flush_period: float = 1.0,
                  source: EventSource | None = None) -> None:
        """Schedule until cancelled: pop, run a cycle, yield to the loop so binds and events progress.
        With an event source (the informers), nothing is scheduled before its first full list."""
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            if source is not None:
                synced = asyncio.Event()
                tg.create_task(source.run(self, synced))
                await synced.wait()
            tg.create_task(self.queue.run_flushers(flush_period))
            if ready is not None:
                ready.set()
            try:
                while True:
                    qp = await self.queue.pop()
                    await self.schedule_one(qp)
                    await asyncio.sleep(0)
            finally:
                self._tg = None
                await self.close()

    async def close(self) -> None:
        """Release what the scheduler holds outside the loop (its extenders' connection pools)."""
        for ext in self.extenders:
            await ext.close()

    async def drain(self) -> None:
        """Run cycles until activeQ is empty and every started task has finished (tests, benchmarks)."""
        while True:
            qp = self.queue.pop_nowait()
            if qp is not None:
                await self.schedule_one(qp)
                await asyncio.sleep(0)
                continue
            if self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
                continue
            return


async def _logged(coro: Coroutine[Any, Any, Any]) -> None:
    try:
        await coro
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("scheduler API call failed")


def _affinity_related(qp: QueuedPodInfo, added: PodInfo) -> bool:
    """An assigned pod appearing can help only pods blocked on pod affinity or topology spread."""
    return bool(qp.unschedulable_plugins & {"InterPodAffinity", "PodTopologySpread"}) or \
        not qp.unschedulable_plugins


def _scaled_down(old: dict[str, Any], new: dict[str, Any]) -> bool:
    os_, ns_ = old.get("spec") or {}, new.get("spec") or {}
    if os_.get("containers") == ns_.get("containers") \
            and os_.get("initContainers") == ns_.get("initContainers") \
            and os_.get("overhead") == ns_.get("overhead"):
        return False

    def req(p: dict[str, Any]) -> tuple[int, int]:
        pi = PodInfo(p)
        return pi.req_cpu, pi.req_mem
    o, n = req(old), req(new)
    return n[0] < o[0] or n[1] < o[1]


def node_update_actions(old: dict[str, Any], new: dict[str, Any]) -> ActionType:
    """Which kinds of node change happened (kube-scheduler's nodeSchedulingPropertiesChange)."""
    act = ActionType(0)
    os_, ns_ = old.get("status") or {}, new.get("status") or {}
    if os_.get("allocatable") != ns_.get("allocatable"):
        act |= ActionType.UPDATE_NODE_ALLOCATABLE
    if (old.get("metadata") or {}).get("labels") != (new.get("metadata") or {}).get("labels"):
        act |= ActionType.UPDATE_NODE_LABEL
    ospec, nspec = old.get("spec") or {}, new.get("spec") or {}
    if ospec.get("taints") != nspec.get("taints") \
            or bool(ospec.get("unschedulable")) != bool(nspec.get("unschedulable")):
        act |= ActionType.UPDATE_NODE_TAINT

    def conds(s: dict[str, Any]) -> dict[str, str]:
        return {c.get("type"): c.get("status") for c in s.get("conditions") or ()}
    if conds(os_) != conds(ns_):
        act |= ActionType.UPDATE_NODE_CONDITION | ActionType.UPDATE_NODE_TAINT  # condition taints follow
    if (old.get("metadata") or {}).get("annotations") != (new.get("metadata") or {}).get("annotations"):
        act |= ActionType.UPDATE_NODE_ANNOTATION
    return act
