"""Who may use the kubelet API (the kubelet's webhook authn/authz, pkg/kubelet/server/auth.go).

A client certificate signed by the cluster CA authenticates its subject (CN = user, O = groups); a
bearer token is checked with the apiserver. The request maps to attributes on the node object, as the
kubelet maps them: verb from the method, resource `nodes`, subresource `stats`, `metrics`, `log` or
`proxy` (everything else). Tokens are reviewed with the token itself through a
SelfSubjectAccessReview (our apiserver serves no TokenReview): 401 there means the token is unknown,
`allowed: false` means forbidden. Decisions are cached briefly, as the kubelet's webhook caches do.
"""

from __future__ import annotations

import dataclasses
import json
import ssl
from typing import Any

import aiohttp

from nodeagent.clock import REAL_CLOCK, Clock

MASTERS = "system:masters"
CACHE_TTL = 30.0
_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
          "DELETE": "delete"}


@dataclasses.dataclass(frozen=True)
class Decision:
    status: int  # 200 allowed, 401 unauthenticated, 403 forbidden
    reason: str = ""


def attributes(method: str, path: str, node: str) -> dict[str, str]:
    """The resourceAttributes the kubelet authorizes a request with."""
    sub = "proxy"
    for prefix, name in (("/stats", "stats"), ("/metrics", "metrics"), ("/logs", "log")):
        if path == prefix or path.startswith(prefix + "/"):
            sub = name
    return {"verb": _VERBS.get(method.upper(), "get"), "resource": "nodes", "subresource": sub, "name": node}


def cert_subject(peercert: dict[str, Any] | None) -> tuple[str, tuple[str, ...]] | None:
    """(CN, O values) of a verified peer certificate in ssl's decoded form."""
    if not peercert:
        return None
    cn, orgs = "", []
    for rdn in peercert.get("subject", ()):
        for k, v in rdn:
            if k == "commonName":
                cn = v
            elif k == "organizationName":
                orgs.append(v)
    return cn, tuple(orgs)


class Authenticator:
    def __init__(self, node: str, server: str, ssl_ctx: ssl.SSLContext | None,
                 clock: Clock = REAL_CLOCK) -> None:
        self.node = node
        self.clock = clock
        self.server = server.rstrip("/")
        self.ssl_ctx = ssl_ctx
        self._cache: dict[tuple[str, str, str], tuple[float, Decision]] = {}
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def check(self, method: str, path: str, authorization: str | None,
                    peercert: dict[str, Any] | None) -> Decision:
        attrs = attributes(method, path, self.node)
        subject = cert_subject(peercert)
        if subject is not None:
            user, groups = subject
            if MASTERS in groups:
                return Decision(200)
            return Decision(403,
                            f'User "{user}" cannot {attrs["verb"]} resource "nodes/{attrs["subresource"]}" '
                                 f'on node "{self.node}"')
        if not authorization or not authorization.startswith("Bearer ") or not authorization[7:].strip():
            return Decision(401, "Unauthorized")
        token = authorization[7:].strip()
        key = (token, attrs["verb"], attrs["subresource"])
        hit = self._cache.get(key)
        now = self.clock.monotonic()
        if hit is not None and now - hit[0] < CACHE_TTL:
            return hit[1]
        d = await self._review(token, attrs)
        if d.status != 503:
            self._cache[key] = (now, d)
        if len(self._cache) > 1024:
            self._cache = {k: v for k, v in self._cache.items() if now - v[0] < CACHE_TTL}
        return d

    async def _review(self, token: str, attrs: dict[str, str]) -> Decision:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.ssl_ctx if self.ssl_ctx is not None else False),
                timeout=aiohttp.ClientTimeout(total=10))
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attrs}}
        try:
            url = f"{self.server}/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
            async with self._session.post(url, data=json.dumps(body),
                                          headers={"Authorization": f"Bearer {token}",
                                                   "Content-Type": "application/json"}) as r:
                raw = await r.read()
                if r.status == 401:
                    return Decision(401, "Unauthorized")
                if r.status >= 400:
                    return Decision(403,
                                    f"access review failed: {r.status} {raw[:200].decode(errors='replace')}")
                st = json.loads(raw).get("status") or {}
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            return Decision(503, f"cannot review the token with the apiserver: {e}")
        if st.get("allowed"):
            return Decision(200)
        return Decision(403,
                        f'Forbidden (user cannot {attrs["verb"]} resource "nodes/{attrs["subresource"]}": '
                             f'{st.get("reason", "")})')
