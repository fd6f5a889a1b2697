"""The clusterrole-aggregation loop: any ClusterRole change requeues every aggregated ClusterRole, whose
rules are then written as the union of the roles it selects (admin/edit/view pick up a labelled role)."""

from __future__ import annotations

from typing import Any

from nodeagent.client.rest import ClientError
from nodeagent.controllers.base import Controller, SharedInformers
from nodeagent.controllers.clusterroleaggregation import aggregated_rules


class ClusterRoleAggregationController(Controller):
    name = "clusterrole-aggregation"
    service_account = "clusterrole-aggregation-controller"
    workers = 1

    def __init__(self, client: Any, informers: SharedInformers, recorder: Any, options: Any = None) -> None:
        super().__init__(client, informers, recorder, options)
        self.roles = informers.get("clusterroles")
        self.roles.add_handler(self._changed, lambda old, new: self._changed(new), self._changed)

    def _changed(self, _: dict[str, Any]) -> None:
        for role in self.roles.list():
            if role.get("aggregationRule"):
                self.enqueue(role)

    async def reconcile(self, key: str) -> None:
        role = self.roles.get(key)
        if role is None or not role.get("aggregationRule"):
            return
        rules = aggregated_rules(role, self.roles.list())
        if rules == (role.get("rules") or []):
            return
        patch = {"metadata": {"resourceVersion": role["metadata"].get("resourceVersion")}, "rules": rules}
        try:
            await self.client.patch("clusterroles", key, patch)
        except ClientError as e:
            if not e.not_found:
                raise
        self.log.info("clusterrole %s: %d rules aggregated", key, len(rules))
