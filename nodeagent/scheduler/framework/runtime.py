"""The Framework: one profile's plugins wired to their extension points, and the loops that run them.

Plugins are registered at every point whose method they implement, filtered by the profile's
enabled/disabled lists per point. Filters run in profile order and stop at a node's first
rejection (kube-scheduler's default); batch-capable plugins get whole chunks of nodes at once.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable
from typing import Any

from nodeagent.scheduler.framework.interface import (
    MAX_NODE_SCORE,
    ClusterEventWithHint,
    CycleState,
    PostFilterResult,
    PreFilterResult,
)
from nodeagent.scheduler.framework.scorecache import NodeScoreCache
from nodeagent.scheduler.framework.status import Code, Status, error, ok
from nodeagent.scheduler.framework.types import NodeInfo, PodInfo

log = logging.getLogger("nodeagent.scheduler")

# extension point -> method the plugin must have
POINTS = {
    "queueSort": "sort_key",
    "preEnqueue": "pre_enqueue",
    "preFilter": "pre_filter",
    "filter": "filter",
    "postFilter": "post_filter",
    "preScore": "pre_score",
    "score": "score",
    "reserve": "reserve",
    "permit": "permit",
    "preBind": "pre_bind",
    "bind": "bind",
    "postBind": "post_bind",
}


@dataclasses.dataclass
class PluginSet:
    """Which plugins run at each point, in order, and score weights."""
    points: dict[str, list[str]]
    weights: dict[str, int]


class Framework:
    def __init__(self, profile_name: str, plugins: dict[str, Any], plugin_set: PluginSet, handle: Any):
        self.profile_name = profile_name
        self.plugins = plugins
        self.handle = handle
        self.weights = plugin_set.weights
        pts = plugin_set.points

        def at(point: str) -> list[Any]:
            meth = POINTS[point]
            return [plugins[n] for n in pts.get(point, []) if hasattr(plugins[n], meth)]

        qs = at("queueSort")
        if len(qs) != 1:
            raise ValueError(f"profile {profile_name}: exactly one queueSort plugin is required, "
                             f"got {len(qs)}")
        self.queue_sort = qs[0]
        self.pre_enqueue_plugins = at("preEnqueue")
        self.pre_filter_plugins = at("preFilter")
        self.filter_plugins = at("filter")
        self.post_filter_plugins = at("postFilter")
        self.pre_score_plugins = at("preScore")
        self.score_plugins = at("score")
        self.reserve_plugins = at("reserve")
        self.permit_plugins = at("permit")
        self.pre_bind_plugins = at("preBind")
        self.bind_plugins = at("bind")
        self.post_bind_plugins = at("postBind")
        if not self.bind_plugins:
            raise ValueError(f"profile {profile_name}: at least one bind plugin is required")
        self.waiting: dict[str, asyncio.Future[Status | None]] = {}
        self.ext_plugins = [p for p in self.pre_filter_plugins if hasattr(p, "add_pod")]
        self._pod_dependent: dict[tuple[int, str | None], list[Any]] = {}
        self._totals = NodeScoreCache()  # run_score's weighted totals per node, for one pod shape

    # -- queue ---------------------------------------------------------------------------------------

    def events_to_register(self) -> dict[str, list[ClusterEventWithHint]]:
        out = {}
        for name, p in self.plugins.items():
            if hasattr(p, "events_to_register"):
                out[name] = p.events_to_register()
        return out

    def run_pre_enqueue(self, pod: PodInfo) -> Status | None:
        for p in self.pre_enqueue_plugins:
            s = p.pre_enqueue(pod)
            if not ok(s):
                return s.with_plugin(p.name)
        return None

    # -- scheduling cycle ----------------------------------------------------------------------------

    def run_pre_filter(self, state: CycleState, pod: PodInfo) -> tuple[PreFilterResult | None, Status | None]:
        result: PreFilterResult | None = None
        for p in self.pre_filter_plugins:
            r, s = p.pre_filter(state, pod)
            if s is not None and s.code == Code.SKIP:
                state.skip_filter.add(p.name)
                continue
            if not ok(s):
                return None, s.with_plugin(p.name)
            if r is not None and r.node_names is not None:
                names = r.node_names if result is None or result.node_names is None \
                    else result.node_names & r.node_names
                result = PreFilterResult(names, (result.plugins if result else ()) + (p.name,))
                if not names:
                    reason = "node(s) didn't satisfy plugin(s) [" + " ".join(result.plugins) + "]"
                    return result, Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (reason,), p.name)
        return result, None

    def run_pre_filter_add_pod(self, state: CycleState, pod: PodInfo, to_add: PodInfo,
                               node: NodeInfo) -> None:
        for p in self.ext_plugins:
            if p.name not in state.skip_filter:
                p.add_pod(state, pod, to_add, node)

    def run_pre_filter_remove_pod(self, state: CycleState, pod: PodInfo, to_remove: PodInfo,
                                  node: NodeInfo) -> None:
        for p in self.ext_plugins:
            if p.name not in state.skip_filter:
                p.remove_pod(state, pod, to_remove, node)

    def active_filters(self, state: CycleState) -> list[Any]:
        skip = state.skip_filter
        return [p for p in self.filter_plugins if p.name not in skip] if skip else self.filter_plugins

    def what_if_state(self, state: CycleState) -> CycleState:
        """A CycleState preemption/nominated what-ifs may change: cloned only when a PreFilter
        extension (add_pod/remove_pod) would write to it."""
        for p in self.ext_plugins:
            if p.name not in state.skip_filter and p.name in state:
                return state.clone()
        return state

    def pod_dependent(self, filters: list[Any], after: str | None = "") -> list[Any]:
        """The filters whose verdict can change when pods are added to or removed from a node.
        Node-only filters are kept if they come at or after plugin `after` (they haven't been seen
        to pass on that node): all of them when `after` is "" (unknown), none when it is None
        (every filter already passed on the node)."""
        key = (hash(tuple(p.name for p in filters)), after)
        got = self._pod_dependent.get(key)
        if got is not None:
            return got
        out, seen = [], after == ""
        for p in filters:
            if p.name == after:
                seen = True
            if seen or getattr(p, "pod_dependent", True):
                out.append(p)
        self._pod_dependent[key] = out
        return out

    def run_filters(self, state: CycleState, pod: PodInfo, node: NodeInfo,
                    filters: list[Any] | None = None) -> Status | None:
        """All filters on one node, stopping at the first rejection."""
        for p in filters if filters is not None else self.active_filters(state):
            s = p.filter(state, pod, node)
            if s is not None and s.code != Code.SUCCESS:
                return s if s.plugin else s.with_plugin(p.name)
        return None

    def filter_chunk(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo], filters: list[Any],
                     failed: dict[str, Status]) -> list[NodeInfo]:
        """Run filters over a chunk of nodes: returns the feasible ones, records rejections in `failed`."""
        for p in filters:
            if not nodes:
                break
            fm = getattr(p, "filter_many", None)
            if fm is not None:
                nodes, rejected = fm(state, pod, nodes)
                for n, s in rejected:
                    failed[n.name] = s
            else:
                passed = []
                f = p.filter
                for n in nodes:
                    s = f(state, pod, n)
                    if s is None or s.code == Code.SUCCESS:
                        passed.append(n)
                    else:
                        failed[n.name] = s if s.plugin else s.with_plugin(p.name)
                nodes = passed
        return nodes

    async def run_post_filter(self, state: CycleState, pod: PodInfo, statuses: dict[str, Status],
                              call_out: bool = False) -> tuple[PostFilterResult | None, Status | None]:
        """The first PostFilter plugin that makes the pod schedulable wins. With `call_out` (preempting
        extenders are configured) a plugin's post_filter_async stands in for its post_filter; without, the
        plugins run synchronously and nothing here awaits."""
        last: Status | None = Status(Code.UNSCHEDULABLE, (), "")
        for p in self.post_filter_plugins:
            pfa = getattr(p, "post_filter_async", None) if call_out else None
            r, s = await pfa(state, pod, statuses) if pfa is not None else p.post_filter(state, pod, statuses)
            if ok(s):
                return r, None
            if s.code != Code.UNSCHEDULABLE:
                return r, s.with_plugin(p.name)
            last = s.with_plugin(p.name)
        return None, last

    def run_pre_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> Status | None:
        for p in self.pre_score_plugins:
            s = p.pre_score(state, pod, nodes)
            if s is not None and s.code == Code.SKIP:
                state.skip_score.add(p.name)
            elif not ok(s):
                return s.with_plugin(p.name)
        return None

    def run_score(self, state: CycleState, pod: PodInfo, nodes: list[NodeInfo]) -> list[int]:
        """Weighted sum of every score plugin's normalized 0..100 score, per node (same order as nodes).

        When every plugin that scores this pod names the pod's shape (`score_shape`: its score is a pure
        function of that shape and the NodeInfo), the weighted totals are kept per node for the shape
        (scorecache.py): one read per unchanged node instead of one per plugin and a sum."""
        skip = state.skip_score
        active = [p for p in self.score_plugins if p.name not in skip] if skip else self.score_plugins
        key: list[Any] = []
        for p in active:
            shape_of = getattr(p, "score_shape", None)
            shape = shape_of(pod) if shape_of is not None else None
            if shape is None:
                return self.score_totals(active, state, pod, nodes)
            key.append((p.name, shape))
        if not key:
            return [0] * len(nodes)
        return self._totals.scores(tuple(key), nodes, lambda ns: self.score_totals(active, state, pod, ns))

    def score_totals(self, active: list[Any], state: CycleState, pod: PodInfo, nodes: list[NodeInfo]
                     ) -> list[int]:
        """The weighted sum of the `active` plugins' normalized scores, per node, computed afresh."""
        total: list[int] | None = None
        for p in active:
            sm = getattr(p, "score_many", None)
            scores = sm(state, pod, nodes) if sm is not None else [p.score(state, pod, n) for n in nodes]
            norm = getattr(p, "normalize_score", None)
            if norm is not None:
                norm(state, pod, scores)
            if scores and (max(scores) > MAX_NODE_SCORE or min(scores) < 0):
                raise ValueError(f"plugin {p.name} returned a score outside [0, {MAX_NODE_SCORE}]")
            w = self.weights.get(p.name, 1)
            if total is None:
                total = scores if w == 1 else [s * w for s in scores]
            elif w == 1:
                total = [a + b for a, b in zip(total, scores, strict=True)]
            else:
                total = [a + b * w for a, b in zip(total, scores, strict=True)]
        return total if total is not None else [0] * len(nodes)

    # -- reserve / permit / binding cycle -------------------------------------------------------------

    def run_reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        for p in self.reserve_plugins:
            s = p.reserve(state, pod, node_name)
            if not ok(s):
                return s.with_plugin(p.name)
        return None

    def run_unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        for p in reversed(self.reserve_plugins):
            try:
                p.unreserve(state, pod, node_name)
            except Exception:  # unreserve must not stop the others from cleaning up
                log.exception("unreserve %s for %s", p.name, pod.key)

    def run_permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status | None, float]:
        wait = 0.0
        for p in self.permit_plugins:
            s, timeout = p.permit(state, pod, node_name)
            if s is not None and s.code == Code.WAIT:
                wait = max(wait, timeout)
            elif not ok(s):
                return s.with_plugin(p.name), 0.0
        if wait > 0:
            return Status(Code.WAIT), wait
        return None, 0.0

    async def wait_on_permit(self, pod: PodInfo, wait_seconds: float) -> Status | None:
        fut: asyncio.Future[Status | None] = asyncio.get_running_loop().create_future()
        self.waiting[pod.uid] = fut
        try:
            async with asyncio.timeout(wait_seconds):
                return await fut
        except TimeoutError:
            return Status(Code.UNSCHEDULABLE, ("rejected due to timeout after waiting at permit",), "")
        finally:
            self.waiting.pop(pod.uid, None)

    def allow_waiting_pod(self, uid: str, status: Status | None = None) -> bool:
        fut = self.waiting.get(uid)
        if fut is None or fut.done():
            return False
        fut.set_result(status)
        return True

    async def run_pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        for p in self.pre_bind_plugins:
            s = await p.pre_bind(state, pod, node_name)
            if not ok(s):
                return s.with_plugin(p.name)
        return None

    async def run_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status | None:
        for p in self.bind_plugins:
            try:
                s = await p.bind(state, pod, node_name)
            except Exception as e:  # a binder's transport error is a bind failure, retried with backoff
                return error(p.name, f"binding rejected: {e}")
            if s is not None and s.code == Code.SKIP:
                continue
            return None if ok(s) else s.with_plugin(p.name)
        return error("", "all bind plugins skipped the pod")

    def run_post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        for p in self.post_bind_plugins:
            p.post_bind(state, pod, node_name)


def plugins_named(names: Iterable[str], plugins: dict[str, Any]) -> list[Any]:
    return [plugins[n] for n in names if n in plugins]
