"""--use-service-account-credentials: a controller's account is made once, its token requested for an hour
and renewed past 80% of it; a failed renewal keeps the old token and is retried."""

from __future__ import annotations

import asyncio
from typing import Any

from nodeagent.client.rest import ClientError
from nodeagent.controllers.sa_credentials import ServiceAccountCredentials
from nodeagent.testing.clock import FakeClock


class Tokened:
    def __init__(self, token: str) -> None:
        self.token = token

    def set_token(self, token: str) -> None:
        self.token = token

    async def close(self) -> None:
        pass


class Root:
    """The manager's own client, as far as the credentials use it."""

    def __init__(self) -> None:
        self.accounts: set[str] = set()
        self.requests: list[dict[str, Any]] = []
        self.fail = 0

    async def create(self, resource: str, obj: dict[str, Any], namespace: str) -> dict[str, Any]:
        name = obj["metadata"]["name"]
        if name in self.accounts:
            raise ClientError(409, "AlreadyExists", f'serviceaccounts "{name}" already exists')
        self.accounts.add(name)
        return obj

    async def request(self, method: str, path: str, body: Any = None) -> Any:
        if self.fail:
            self.fail -= 1
            raise ClientError(0, "ConnectionError", "refused")
        self.requests.append({"path": path, "body": body})
        return {"status": {"token": f"t{len(self.requests)}"}}

    def with_token(self, token: str) -> Tokened:
        return Tokened(token)


async def test_accounts_made_once_and_tokens_renewed() -> None:
    root, clock = Root(), FakeClock()
    creds = ServiceAccountCredentials(root, clock)  # type: ignore[arg-type]
    a = await creds.client_for("replicaset-controller")
    assert a is await creds.client_for("replicaset-controller")
    assert root.accounts == {"replicaset-controller"}
    assert root.requests[0] == {
        "path": "/api/v1/namespaces/kube-system/serviceaccounts/replicaset-controller/token",
        "body": {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    }
    assert a.token == "t1"
    task = asyncio.create_task(creds.run())
    await asyncio.sleep(0)
    clock.advance(2879)
    await asyncio.sleep(0)
    assert a.token == "t1"
    root.fail = 1
    clock.advance(1)  # 80% of an hour: renew; the first try fails, the old token stays
    for _ in range(5):
        await asyncio.sleep(0)
    assert a.token == "t1"
    clock.advance(10)
    for _ in range(5):
        await asyncio.sleep(0)
    assert a.token == "t2"
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
