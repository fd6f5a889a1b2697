"""The node lifecycle loop: heartbeats -> Ready Unknown -> rate-limited NoExecute taints -> evictions.

Every --node-monitor-period the monitor reads Nodes and their Leases from the
informers, marks nodes whose heartbeat has been silent for the grace period
Unknown (NodeNotReady event), recomputes the zone states and rates, and adds or
removes the lifecycle taints (NoExecute ones only when the zone's limiter grants
a token). The taint manager deletes pods that do not tolerate a node's NoExecute
taints once their tolerationSeconds have passed (TaintManagerEviction event).
Decisions live in nodelifecycle.py; this module only reads caches and writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from nodeagent.api.objects import Obj
from nodeagent.client.rest import ClientError
from nodeagent.clock import utcnow
from nodeagent.controllers import nodelifecycle as nl
from nodeagent.controllers.base import Controller, SharedInformers
from nodeagent.controllers.options import iso

LEASE_NAMESPACE = "kube-node-lease"
TAINT_MANAGER_PERIOD = 0.5


class NodeLifecycleController(Controller):
    name = "nodelifecycle"
    service_account = "node-controller"

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.nodes = informers.get("nodes")
        self.leases = informers.get("leases")
        self.pods = informers.get("pods")
        self.settings = self.options.lifecycle_settings()
        self.clock = self.options.clock
        self.tracker = nl.HeartbeatTracker(self.options.clock)
        self.limiter = nl.ZoneLimiter(self.options.clock)
        self.zone_states: dict[str, str] = {}
        self.tainted_at: dict[str, dict[str, float]] = {}  # node -> NoExecute taint key -> first seen (clock)
        self.evicted: set[str] = set()  # pod uids already deleted by the taint manager
        self.nodes.add_handler(None, None, self._node_deleted)

    def _node_deleted(self, node: Obj) -> None:
        name = node["metadata"]["name"]
        self.tracker.forget(name)
        self.tainted_at.pop(name, None)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._loop(self.monitor_once, self.options.node_monitor_period),
                           name="node-monitor")
            tg.create_task(self._loop(self.taint_manager_once,
                                      min(TAINT_MANAGER_PERIOD, self.options.node_monitor_period)),
                           name="taint-manager")

    async def _loop(self, fn, period: float) -> None:
        while True:
            try:
                await fn()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.log.warning("%s: %s", fn.__name__, e)
            await self.options.clock.sleep(period)

    # -- node monitor ------------------------------------------------------------------------------
    def _lease(self, node_name: str) -> Obj | None:
        return self.leases.get(node_name, LEASE_NAMESPACE)

    async def monitor_once(self) -> None:
        now_iso = iso(utcnow(self.options.clock))
        nodes = []
        for node in self.nodes.list():
            name = node["metadata"]["name"]
            self.tracker.observe(name, nl.heartbeat_of(node, self._lease(name)))
            if self.tracker.silent_for(name) > self.settings.grace_period:
                node = await self._mark_unknown(node, now_iso)
            nodes.append(node)
        states, rates = nl.zone_rates(nodes, self.settings)
        for zone, state in states.items():
            if self.zone_states.get(zone) not in (None, state):
                self.log.info("zone %r is now %s", zone.replace("\x00", ""), state)
            self.limiter.set_rate(zone, rates[zone])
        self.zone_states = states
        not_ready = {n["metadata"]["name"] for n in nodes if nl.ready_status(n) != "True"}
        if not_ready:
            await self._mark_pods_not_ready(not_ready, now_iso)
        for node in nodes:
            allow = nl.needs_no_execute_taint(node) and self.limiter.try_take(nl.zone_key(node))
            taints = nl.reconcile_taints(node, now_iso, allow)
            if taints is not None:
                await self._set_taints(node, taints)

    async def _mark_unknown(self, node: Obj, now_iso: str) -> Obj:
        conds = nl.unknown_conditions(node, now_iso)
        if conds is None:
            return node
        name = node["metadata"]["name"]
        new = {**node, "status": {**(node.get("status") or {}), "conditions": conds}}
        try:
            updated = await self.client.update_status("nodes", new)
        except ClientError as e:
            if e.not_found or e.conflict:
                return node
            raise
        self.log.info("node %s: no heartbeat for %.0fs, Ready is now Unknown", name,
                      self.tracker.silent_for(name))
        self.recorder.record(node, "Normal", "NodeNotReady", f"Node {name} status is now: NodeNotReady")
        return updated

    async def _mark_pods_not_ready(self, node_names: set[str], now_iso: str) -> None:
        """Pods on nodes that are not Ready stop counting as Ready (Endpoints drop them)."""
        for pod in self.pods.list():
            if (pod.get("spec") or {}).get("nodeName") not in node_names:
                continue
            status = nl.not_ready_pod_status(pod, now_iso)
            if status is None:
                continue
            try:
                await self.client.update_status("pods", {**pod, "status": status})
                self.recorder.record(pod, "Warning", "NodeNotReady", "Node is not ready")
            except ClientError as e:
                if not (e.not_found or e.conflict):
                    raise

    async def _set_taints(self, node: Obj, taints: list[Obj]) -> None:
        meta = node["metadata"]
        patch = {"metadata": {"resourceVersion": meta.get("resourceVersion")},
                 "spec": {"taints": taints or None}}
        try:
            await self.client.patch("nodes", meta["name"], patch)
        except ClientError as e:
            if not (e.not_found or e.conflict):
                raise

    # -- taint manager -----------------------------------------------------------------------------
    async def taint_manager_once(self) -> None:
        now = self.clock.monotonic()
        by_node: dict[str, list[dict[str, Any]]] = {}
        for pod in self.pods.list():
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name:
                by_node.setdefault(node_name, []).append(pod)
        for node in self.nodes.list():
            name = node["metadata"]["name"]
            keys = {x.get("key") for x in (node.get("spec") or {}).get("taints") or []
                    if x.get("effect") == "NoExecute"}
            seen = self.tainted_at.setdefault(name, {})
            for k in list(seen):
                if k not in keys:
                    del seen[k]
            for k in keys:
                seen.setdefault(k, now)
            if not keys:
                continue
            pods = [p for p in by_node.get(name, []) if p["metadata"].get("uid") not in self.evicted]
            due, _ = nl.pods_to_evict(pods, node, seen, now)
            for victim in due:
                await self._evict(victim)

    async def _evict(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        self.evicted.add(meta.get("uid"))
        if len(self.evicted) > 100_000:
            self.evicted.clear()
        self.recorder.record(pod, "Normal", "TaintManagerEviction",
                             f"Marking for deletion Pod {meta.get('namespace')}/{meta['name']}")
        try:
            await self.client.delete("pods", meta["name"], meta.get("namespace"))
        except ClientError as e:
            if not e.not_found:
                self.evicted.discard(meta.get("uid"))
                raise
