"""Build a scheduler over the in-memory cluster and call single plugins against hand-built objects."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from nodeagent.scheduler.framework import CycleState, PodInfo, Status
from nodeagent.scheduler.framework.status import Code
from nodeagent.scheduler.profile import SchedulerConfig, parse_config
from nodeagent.scheduler.scheduler import Scheduler
from nodeagent.testing.fake_cluster import FakeCluster


class Env:
    def __init__(self, nodes: Sequence[dict[str, Any]] = (), pods: Sequence[dict[str, Any]] = (),
                 config: dict[str, Any] | None = None, seed: int = 1):
        self.cluster = FakeCluster()
        cfg = parse_config(config) if config is not None else SchedulerConfig()
        self.sched = Scheduler(cfg, self.cluster.api(), rng=random.Random(seed))
        self.cluster.subscribe(self.sched)
        for n in nodes:
            self.cluster.add_node(n)
        for p in pods:
            self.cluster.add_pod(p)

    @property
    def fw(self):
        return next(iter(self.sched.frameworks.values()))

    def plugin(self, name: str) -> Any:
        return self.fw.plugins[name]

    def _prep(self, pod: dict[str, Any]) -> tuple[CycleState, PodInfo]:
        self.sched.handle.framework = self.fw
        self.sched.handle.snapshot = self.sched.cache.snapshot()
        return CycleState(), self.sched._pod_info(pod)

    def filter(self, plugin: str, pod: dict[str, Any], node: str) -> Status | None:
        """PreFilter then Filter of one plugin on one node (None = passes)."""
        state, pi = self._prep(pod)
        p = self.plugin(plugin)
        if hasattr(p, "pre_filter"):
            _, s = p.pre_filter(state, pi)
            if s is not None and s.code == Code.SKIP:
                return None
            if s is not None:
                return s
        return p.filter(state, pi, self.sched.cache.nodes[node])

    def filter_all(self, plugin: str, pod: dict[str, Any]) -> dict[str, str]:
        """node -> first reason (or "") for every node, through the batch path when the plugin has one."""
        state, pi = self._prep(pod)
        p = self.plugin(plugin)
        if hasattr(p, "pre_filter"):
            _, s = p.pre_filter(state, pi)
            if s is not None and s.code == Code.SKIP:
                return {n.name: "" for n in self.sched.cache.snapshot().nodes}
        nodes = self.sched.cache.snapshot().nodes
        out = {}
        if hasattr(p, "filter_many"):
            ok, bad = p.filter_many(state, pi, list(nodes))
            out.update({n.name: "" for n in ok})
            out.update({n.name: s.reasons[0] for n, s in bad})
            single = {n.name: (s.reasons[0] if (s := p.filter(state, pi, n)) else "") for n in nodes}
            assert single == out, "filter and filter_many disagree"
        else:
            out = {n.name: (s.reasons[0] if (s := p.filter(state, pi, n)) else "") for n in nodes}
        return out

    def scores(self, plugin: str, pod: dict[str, Any]) -> dict[str, int] | None:
        """PreScore, Score and NormalizeScore of one plugin over all nodes (None if it skips)."""
        state, pi = self._prep(pod)
        p = self.plugin(plugin)
        nodes = list(self.sched.cache.snapshot().nodes)
        if hasattr(p, "pre_score"):
            s = p.pre_score(state, pi, nodes)
            if s is not None and s.code == Code.SKIP:
                return None
        if hasattr(p, "score_many"):
            sc = p.score_many(state, pi, nodes)
            assert sc == [p.score(state, pi, n) for n in nodes] or plugin == "PodTopologySpread"
        else:
            sc = [p.score(state, pi, n) for n in nodes]
        if hasattr(p, "normalize_score"):
            p.normalize_score(state, pi, sc)
        return {n.name: s for n, s in zip(nodes, sc, strict=True)}
