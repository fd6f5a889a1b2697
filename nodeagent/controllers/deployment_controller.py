"""The Deployment reconcile loop: one ReplicaSet per template, rolled by strategy, status for `rollout
status`."""

from __future__ import annotations

import copy
import math
from typing import Any

from nodeagent.api.objects import Obj
from nodeagent.api.selectors import from_label_selector
from nodeagent.api.times import now_rfc3339, parse_time
from nodeagent.client.informer import SharedInformers
from nodeagent.client.rest import ClientError
from nodeagent.clock import utcnow
from nodeagent.controllers import deployment as d
from nodeagent.controllers import podutil
from nodeagent.controllers.base import Controller, split_key


class DeploymentController(Controller):
    name = "deployment"
    service_account = "deployment-controller"
    workers = 2

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.deployments = informers.get("deployments")
        self.rss = informers.get("replicasets")
        self.pods = informers.get("pods")
        self.deployments.add_handler(self.enqueue, lambda old, new: self.enqueue(new), None)
        self.rss.add_handler(self._rs_changed, lambda old, new: self._rs_changed(new), self._rs_changed)
        self.pods.add_handler(None, None, self._pod_deleted)

    def _rs_changed(self, rs: Obj) -> None:
        ref = podutil.controller_ref(rs)
        if ref and ref.get("kind") == "Deployment":
            self.queue.add(f"{rs['metadata'].get('namespace')}/{ref['name']}")

    def _pod_deleted(self, pod: Obj) -> None:
        # Recreate waits for old pods to be gone; a pod deletion may unblock it.
        ref = podutil.controller_ref(pod)
        if ref and ref.get("kind") == "ReplicaSet":
            rs = self.rss.get(ref["name"], pod["metadata"].get("namespace"))
            if rs:
                self._rs_changed(rs)

    async def reconcile(self, key: str) -> None:
        ns, name = split_key(key)
        cached = self.deployments.get(name, ns)
        if cached is None or podutil.is_terminating(cached):
            return
        dep = copy.deepcopy(cached)  # its metadata follows our own writes (the revision annotation)
        rss = await self._owned_replicasets(dep)
        new_rs = d.find_new_rs(dep, rss)
        old = [rs for rs in rss if rs is not new_rs]
        spec = dep.get("spec") or {}
        if spec.get("paused"):
            if new_rs is not None:
                await self._sync_new_rs_annotations(dep, new_rs, old)
            if new_rs is not None and self._is_scaling_event(dep, rss):
                await self._scale(dep, new_rs, old)
            await self._sync_status(dep, new_rs, rss)
            return
        if new_rs is None:
            new_rs = await self._create_new_rs(dep, old, rss)
            rss = old + [new_rs]
        else:
            await self._sync_new_rs_annotations(dep, new_rs, old)
        if self._is_scaling_event(dep, rss) and (spec.get("strategy") or {}).get("type") != "Recreate":
            await self._scale(dep, new_rs, old)
            await self._sync_status(dep, new_rs, rss)
            return
        if (spec.get("strategy") or {}).get("type") == "Recreate":
            await self._recreate(dep, new_rs, old)
        else:
            await self._rolling(dep, new_rs, old, rss)
        status = d.status(dep, new_rs, rss)
        if d.is_complete(dep, status):
            for rs in d.history_to_delete(dep, old):
                try:
                    await self.client.delete("replicasets", rs["metadata"]["name"], ns)
                except ClientError as e:
                    if not e.not_found:
                        raise
        await self._sync_status(dep, new_rs, rss)

    # -- replica sets --------------------------------------------------------------------------------
    async def _owned_replicasets(self, dep: Obj) -> list[Obj]:
        ns = dep["metadata"].get("namespace")
        selector = from_label_selector((dep.get("spec") or {}).get("selector"))
        out = []
        for rs in self.rss.list():
            if rs["metadata"].get("namespace") != ns:
                continue
            verdict = podutil.claimable(rs, dep, selector)
            if verdict == "own":
                out.append(rs)
            elif verdict == "adopt":
                try:
                    out.append(await self.client.patch("replicasets", rs["metadata"]["name"],
                                                       podutil.adopt_patch(dep, rs), ns,
                                                       patch_type="strategic"))
                except ClientError as e:
                    if not (e.not_found or e.code == 422):
                        raise
        return out

    async def _create_new_rs(self, dep: Obj, old: list[Obj], all_rss: list[Obj]) -> Obj:
        ns = dep["metadata"].get("namespace")
        collisions = (dep.get("status") or {}).get("collisionCount")
        count = d.new_rs_replicas(dep, all_rss, None)
        strategy = ((dep.get("spec") or {}).get("strategy") or {}).get("type")
        if strategy == "Recreate" and any(d.replicas(rs) > 0 for rs in old):
            count = 0
        obj = d.new_rs_object(dep, old, count, collisions)
        try:
            created = await self.client.create("replicasets", obj, ns)
        except ClientError as e:
            if e.already_exists:
                # Same name, other template: a hash collision. Bump collisionCount and try again.
                new = copy.deepcopy(dep)
                new.setdefault("status", {})["collisionCount"] = (collisions or 0) + 1
                await self.client.update_status("deployments", new)
            raise
        self.recorder.record(dep, "Normal", "ScalingReplicaSet",
                             f"Scaled up replica set {created['metadata']['name']} to {count}")
        await self._set_deployment_revision(dep, created["metadata"]["annotations"].get(d.REVISION, ""))
        return created

    async def _sync_new_rs_annotations(self, dep: Obj, new_rs: Obj, old: list[Obj]) -> None:
        """getNewReplicaSet for an existing one: its annotations follow the Deployment's, and a template
        that matches an old ReplicaSet (a rollback) makes it the newest revision again."""
        ann = dict((new_rs["metadata"].get("annotations")) or {})
        min_ready = (dep.get("spec") or {}).get("minReadySeconds", 0)
        if d.set_new_rs_annotations(dep, ann, d.next_revision(old), exists=True) \
                or (new_rs.get("spec") or {}).get("minReadySeconds", 0) != min_ready:
            updated = await self.client.patch("replicasets", new_rs["metadata"]["name"],
                                              {"metadata": {"annotations": ann},
                                               "spec": {"minReadySeconds": min_ready}},
                                              new_rs["metadata"].get("namespace"))
            new_rs.update(updated)
        await self._set_deployment_revision(dep, ann.get(d.REVISION, ""))

    async def _set_deployment_revision(self, dep: Obj, rev: str) -> None:
        """SetDeploymentRevision: the Deployment carries its newest ReplicaSet's revision (what `kubectl
        rollout history/undo` read and what undo's JSON patch of /metadata/annotations needs)."""
        if not rev or ((dep["metadata"].get("annotations")) or {}).get(d.REVISION) == rev:
            return
        annotations = {**(dep["metadata"].get("annotations") or {}), d.REVISION: rev}
        want = {**dep, "metadata": {**dep["metadata"], "annotations": annotations}}
        try:  # an update, as kube's (its role may update deployments, not patch them)
            updated = await self.client.update("deployments", want, dep["metadata"].get("namespace"))
        except ClientError as e:
            if e.not_found:
                return
            raise
        dep["metadata"] = updated["metadata"]

    async def _set_replicas(self, dep: Obj, rs: Obj, count: int) -> None:
        if d.replicas(rs) == count:
            return
        surge, _ = d.fenceposts(dep)
        ann = {d.DESIRED_REPLICAS: str(d.replicas(dep)), d.MAX_REPLICAS: str(d.replicas(dep) + surge)}
        before = d.replicas(rs)
        updated = await self.client.patch("replicasets", rs["metadata"]["name"],
                                          {"metadata": {"annotations": ann}, "spec": {"replicas": count}},
                                          rs["metadata"].get("namespace"))
        rs.update(updated)
        verb = "up" if count > before else "down"
        self.recorder.record(dep, "Normal", "ScalingReplicaSet",
                             f"Scaled {verb} replica set {rs['metadata']['name']} to {count} from {before}")

    # -- strategies ----------------------------------------------------------------------------------
    async def _rolling(self, dep: Obj, new_rs: Obj, old: list[Obj], all_rss: list[Obj]) -> None:
        target = d.new_rs_replicas(dep, all_rss, new_rs)
        if target != d.replicas(new_rs):
            await self._set_replicas(dep, new_rs, target)
            return
        for name, count in d.scale_down_old(dep, new_rs, old).items():
            rs = next(r for r in old if r["metadata"]["name"] == name)
            await self._set_replicas(dep, rs, count)

    async def _recreate(self, dep: Obj, new_rs: Obj, old: list[Obj]) -> None:
        active_old = [rs for rs in old if d.replicas(rs) > 0]
        for rs in active_old:
            await self._set_replicas(dep, rs, 0)
        if active_old:
            return
        old_uids = {rs["metadata"]["uid"] for rs in old}
        if any((ref := podutil.controller_ref(p)) and ref.get("uid") in old_uids
               for p in self.pods.list()
               if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")):
            return  # wait until every old pod has terminated
        await self._set_replicas(dep, new_rs, d.replicas(dep))

    def _is_scaling_event(self, dep: Obj, rss: list[Obj]) -> bool:
        """The Deployment's replicas changed since its active ReplicaSets were last sized for it."""
        want = str(d.replicas(dep))
        active = [rs for rs in rss if d.replicas(rs) > 0]
        return any(((rs["metadata"].get("annotations") or {}).get(d.DESIRED_REPLICAS)) not in (None, want)
                   for rs in active)

    async def _scale(self, dep: Obj, new_rs: Obj, old: list[Obj]) -> None:
        """Proportional scaling across the active ReplicaSets (the largest share to the largest)."""
        active = [rs for rs in [new_rs, *old] if d.replicas(rs) > 0]
        desired = d.replicas(dep)
        if len(active) <= 1:
            await self._set_replicas(dep, active[0] if active else new_rs, desired)
            return
        surge, _ = d.fenceposts(dep)
        allowed = desired + surge
        current = sum(d.replicas(rs) for rs in active)
        counts = {rs["metadata"]["name"]: math.floor(d.replicas(rs) * allowed / current) for rs in active}
        leftover = allowed - sum(counts.values())
        for rs in sorted(active, key=lambda r: -d.replicas(r)):
            if leftover <= 0:
                break
            counts[rs["metadata"]["name"]] += 1
            leftover -= 1
        for rs in active:
            await self._set_replicas(dep, rs, counts[rs["metadata"]["name"]])

    # -- status ---------------------------------------------------------------------------------------
    async def _sync_status(self, dep: Obj, new_rs: Obj | None, rss: list[Obj]) -> None:
        status = d.status(dep, new_rs, rss)
        current = dep.get("status") or {}
        if current.get("collisionCount") is not None:
            status["collisionCount"] = current["collisionCount"]
        status["conditions"] = self._conditions(dep, new_rs, status, current.get("conditions") or [])
        if current == status:
            return
        new = copy.deepcopy(dep)
        new["status"] = status
        try:
            await self.client.update_status("deployments", new)
        except ClientError as e:
            if not e.not_found:
                raise

    def _conditions(self, dep: Obj, new_rs: Obj | None, st: dict[str, Any], current: list[Obj]) -> list[Obj]:
        now = now_rfc3339()
        by_type = {c["type"]: c for c in current}
        _, max_unavailable = d.fenceposts(dep)
        available = st["availableReplicas"] >= d.replicas(dep) - max_unavailable

        def put(ctype: str, status: str, reason: str, message: str) -> None:
            prev = by_type.get(ctype)
            c = {"type": ctype, "status": status, "reason": reason, "message": message, "lastUpdateTime": now,
                 "lastTransitionTime": prev["lastTransitionTime"] if prev and prev.get("status") == status
                 else now}
            if prev and all(prev.get(k) == c[k] for k in ("status", "reason", "message")):
                c = prev
            by_type[ctype] = c

        put("Available", "True" if available else "False",
            "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
            "Deployment has minimum availability." if available
            else "Deployment does not have minimum availability.")
        rs_name = new_rs["metadata"]["name"] if new_rs else ""
        if (dep.get("spec") or {}).get("paused"):
            put("Progressing", "Unknown", "DeploymentPaused", "Deployment is paused")
        elif d.is_complete(dep, st):
            put("Progressing", "True", "NewReplicaSetAvailable",
                f'ReplicaSet "{rs_name}" has successfully progressed.')
        else:
            prev = by_type.get("Progressing")
            deadline = (dep.get("spec") or {}).get("progressDeadlineSeconds", 600)
            stalled = False
            if prev and prev.get("reason") == "ReplicaSetUpdated" and prev.get("lastUpdateTime"):
                since = parse_time(prev["lastUpdateTime"])
                stalled = bool(since and (utcnow(self.options.clock) - since).total_seconds() > deadline)
            if stalled or (prev and prev.get("reason") == "ProgressDeadlineExceeded"):
                put("Progressing", "False", "ProgressDeadlineExceeded",
                    f'ReplicaSet "{rs_name}" has timed out progressing.')
            elif not prev or prev.get("reason") != "ReplicaSetUpdated" or \
                    (dep.get("status") or {}).get("updatedReplicas") != st["updatedReplicas"] or \
                    (dep.get("status") or {}).get("availableReplicas") != st["availableReplicas"]:
                # progress was made: refresh the condition (its lastUpdateTime is the progress clock)
                by_type.pop("Progressing", None)
                put("Progressing", "True", "ReplicaSetUpdated", f'ReplicaSet "{rs_name}" is progressing.')
        return [by_type[k] for k in ("Available", "Progressing") if k in by_type]
