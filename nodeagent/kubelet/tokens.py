"""The kubelet's ServiceAccount token manager (pkg/kubelet/token): tokens for projected
`serviceAccountToken` sources, requested through TokenRequest bound to the pod, cached per
(pod, account, audience, lifetime) and asked for again once 80% of their lifetime has passed (or 24 h,
with up to 10 s of jitter). While the apiserver cannot answer, a cached token that has not expired is
still used; a pod's tokens are forgotten when the pod goes."""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Mapping
from typing import Any

from nodeagent.api.times import parse_rfc3339
from nodeagent.client.rest import Client, ClientError
from nodeagent.clock import REAL_CLOCK, Clock

log = logging.getLogger("nodeagent.kubelet.tokens")
MAX_TTL = 24 * 3600.0
MAX_JITTER = 10.0


class TokenError(Exception):
    """No token could be had; the message says why (it becomes the FailedMount event)."""


@dataclasses.dataclass(frozen=True)
class _Cached:
    token: str
    expires: float  # epoch seconds, status.expirationTimestamp
    lifetime: int  # the expirationSeconds asked for


def requires_refresh(entry: _Cached, now: float, jitter: float) -> bool:
    """kubelet's rule: older than 24 h, or within the last 20% of its lifetime (less a jitter)."""
    issued = entry.expires - entry.lifetime
    return now > issued + MAX_TTL - jitter or now > entry.expires - entry.lifetime * 0.2 - jitter


class TokenManager:
    def __init__(self, client: Client, clock: Clock = REAL_CLOCK) -> None:
        self.client = client
        self.clock = clock
        self._cache: dict[tuple[str, str, str, str, int], _Cached] = {}

    async def get(self, pod: Mapping[str, Any], audience: str, expiration: int) -> str:
        """A token for the pod's ServiceAccount, bound to the pod."""
        m = pod.get("metadata") or {}
        ns, uid = m.get("namespace", "default"), m.get("uid", "")
        sa = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        key = (uid, ns, sa, audience, expiration)
        now = self.clock.now()
        cached = self._cache.get(key)
        if cached is not None and not requires_refresh(cached, now, random.uniform(0, MAX_JITTER)):
            return cached.token
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"audiences": [audience] if audience else None, "expirationSeconds": expiration,
                            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": m.get("name", ""),
                                               "uid": uid}}}
        try:
            out = await self.client.create("serviceaccounts", request, ns, subresource="token", name=sa)
            status = out.get("status") or {}
            entry = _Cached(status["token"], parse_rfc3339(status["expirationTimestamp"]), expiration)
        except (ClientError, KeyError, ValueError) as e:
            if cached is not None and now < cached.expires:
                log.warning("pod %s/%s: could not refresh its %s token (%s); the current one stays until "
                            "it expires", ns, m.get("name"), sa, e)
                return cached.token
            raise TokenError(f'failed to fetch token: {e}') from None
        self._cache[key] = entry
        return entry.token

    def forget(self, pod_uid: str) -> None:
        """The pod is gone: drop its tokens."""
        for key in [k for k in self._cache if k[0] == pod_uid]:
            del self._cache[key]
