"""kube-controller-manager's --use-service-account-credentials: each controller writes through a client of
its own ServiceAccount in kube-system (made if missing), authorized by its `system:controller:<name>` role;
the shared informers and the event recorder keep the manager's own credential (system:kube-controller-manager,
which may list and watch everything). Tokens come from TokenRequest and are renewed past 80% of their life,
as the controller manager's client builder does."""

from __future__ import annotations

import asyncio
import logging

from nodeagent.client.rest import Client, ClientError
from nodeagent.clock import REAL_CLOCK, Clock

log = logging.getLogger("nodeagent.controllers")
NAMESPACE = "kube-system"
LIFETIME = 3600  # seconds; the controller manager's tokens are an hour long


class ServiceAccountCredentials:
    def __init__(self, root: Client, clock: Clock = REAL_CLOCK, lifetime: int = LIFETIME) -> None:
        self.root = root
        self.clock = clock
        self.lifetime = lifetime
        self._clients: dict[str, Client] = {}

    async def client_for(self, account: str) -> Client:
        """The client of kube-system/<account>, made (with its ServiceAccount) on first use."""
        if account not in self._clients:
            self._clients[account] = self.root.with_token(await self._token(account))
        return self._clients[account]

    async def _token(self, account: str) -> str:
        try:
            await self.root.create("serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                                       "metadata": {"name": account}}, NAMESPACE)
        except ClientError as e:
            if not e.already_exists:
                raise
        out = await self.root.request(
            "POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": self.lifetime}})
        return str(out["status"]["token"])

    async def run(self) -> None:
        """Renew every client's token past 80% of its lifetime; a failure is logged and retried soon."""
        while True:
            await self.clock.sleep(self.lifetime * 0.8)
            for account, client in list(self._clients.items()):
                while True:
                    try:
                        client.set_token(await self._token(account))
                        break
                    except asyncio.CancelledError:
                        raise
                    except Exception as e:  # the apiserver may be restarting: the old token still works
                        log.warning("renewing the token of kube-system/%s failed, retrying in 10 s: %s",
                                    account, e)
                        await self.clock.sleep(10)

    async def close(self) -> None:
        for c in self._clients.values():
            await c.close()
