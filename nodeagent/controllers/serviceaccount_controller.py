"""The ServiceAccount loop: every active namespace has a `default` ServiceAccount, re-created if deleted."""

from __future__ import annotations

from nodeagent.client.rest import ClientError
from nodeagent.controllers.base import Controller, SharedInformers

DEFAULT = "default"


def needs_default(namespace: dict, existing: dict | None) -> bool:
    """An Active (not Terminating) namespace without its default ServiceAccount."""
    active = (namespace.get("status") or {}).get("phase", "Active") == "Active" and \
        not namespace["metadata"].get("deletionTimestamp")
    return active and existing is None


class ServiceAccountController(Controller):
    name = "serviceaccount"
    service_account = "service-account-controller"

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.namespaces = informers.get("namespaces")
        self.accounts = informers.get("serviceaccounts")
        self.namespaces.add_handler(self.enqueue, lambda old, new: self.enqueue(new), None)
        self.accounts.add_handler(None, None, self._sa_deleted)

    def _sa_deleted(self, sa: dict) -> None:
        if sa["metadata"]["name"] == DEFAULT:
            self.queue.add(sa["metadata"].get("namespace"))

    async def reconcile(self, key: str) -> None:
        ns = self.namespaces.get(key)
        if ns is None or not needs_default(ns, self.accounts.get(DEFAULT, key)):
            return
        sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": DEFAULT, "namespace": key}}
        try:
            await self.client.create("serviceaccounts", sa, key)
        except ClientError as e:
            if not (e.already_exists or e.not_found or e.code == 403):
                raise
