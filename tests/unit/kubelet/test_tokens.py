"""The kubelet's token manager: a TokenRequest bound to the pod, reused until 80% of its lifetime (less
up to 10 s of jitter) or 24 h has passed, kept through an apiserver failure while still valid, and
forgotten with the pod."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.api.times import rfc3339
from nodeagent.client.rest import ClientError
from nodeagent.kubelet.tokens import MAX_JITTER, TokenError, TokenManager
from nodeagent.testing.clock import FakeClock

POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {"serviceAccountName": "app"}}


class FakeClient:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.requests: list[tuple[str, dict[str, Any], str | None, str, str | None]] = []
        self.fail = False

    async def create(self, resource: str, obj: dict[str, Any], namespace: str | None = None,
                     subresource: str = "", name: str | None = None) -> dict[str, Any]:
        self.requests.append((resource, obj, namespace, subresource, name))
        if self.fail:
            raise ClientError(0, "ConnectionError", "connection refused")
        exp = obj["spec"]["expirationSeconds"]
        return {"status": {"token": f"t{len(self.requests)}",
                           "expirationTimestamp": rfc3339(self.clock.now() + exp)}}


async def test_requests_bound_to_the_pod_and_refreshes_past_80_percent() -> None:
    clock = FakeClock(1_800_000_000)
    client = FakeClient(clock)
    m = TokenManager(client, clock)  # type: ignore[arg-type]  # the one call the manager makes
    assert await m.get(POD, "", 3607) == "t1"
    resource, obj, ns, sub, name = client.requests[0]
    assert (resource, ns, sub, name) == ("serviceaccounts", "ns", "token", "app")
    assert obj["spec"]["boundObjectRef"] == {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"}
    assert obj["spec"]["audiences"] is None and obj["spec"]["expirationSeconds"] == 3607
    clock.advance(3607 * 0.8 - MAX_JITTER - 1)
    assert await m.get(POD, "", 3607) == "t1"  # before 80% (and any jitter): the cached one
    clock.advance(MAX_JITTER + 2)
    assert await m.get(POD, "", 3607) == "t2"  # past 80%: a new one
    assert await m.get(POD, "vault", 3607) == "t3"  # another audience is another token


async def test_a_valid_token_outlives_an_apiserver_failure_and_the_pod_forgets_it() -> None:
    clock = FakeClock(1_800_000_000)
    client = FakeClient(clock)
    m = TokenManager(client, clock)  # type: ignore[arg-type]  # the one call the manager makes
    assert await m.get(POD, "", 600) == "t1"
    client.fail = True
    clock.advance(590)
    assert await m.get(POD, "", 600) == "t1"  # due for refresh, the apiserver is down: still valid
    clock.advance(20)
    with pytest.raises(TokenError, match="failed to fetch token"):
        await m.get(POD, "", 600)  # expired and no new one
    client.fail = False
    assert await m.get(POD, "", 600) == "t4"
    m.forget("u1")
    assert await m.get(POD, "", 600) == "t5"
