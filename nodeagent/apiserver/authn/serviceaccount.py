"""kube-apiserver's ServiceAccount token authenticator and its signer: the cluster's signing key
(`pki/sa.key`), the issuer, the API audiences, and authentication of bound and legacy tokens.

A bound token authenticates while its signature, time claims and audience hold and the ServiceAccount and
the object it is bound to (Pod, Secret, Node) still exist with the uid in the token; a legacy token while
its Secret still exists and holds that very token. Failures are logged with their reason; the client gets
a bare 401. A token's verified signature is cached; the existence checks read the watch cache each time,
so deleting a pod invalidates its tokens at once.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes

from nodeagent.api import sa_token
from nodeagent.api.resources import builtin
from nodeagent.api.times import parse_rfc3339
from nodeagent.apiserver import auth
from nodeagent.clock import REAL_CLOCK, Clock
from nodeagent.pki import ensure_sa_keys

log = logging.getLogger("nodeagent.apiserver.authn")
SERVICE_ACCOUNTS = builtin("", "v1", "serviceaccounts")
PODS = builtin("", "v1", "pods")
SECRETS = builtin("", "v1", "secrets")
NODES = builtin("", "v1", "nodes")
SA_TOKEN_TYPE = "kubernetes.io/service-account-token"
SA_NAME_ANNOTATION = "kubernetes.io/service-account.name"
SA_UID_ANNOTATION = "kubernetes.io/service-account.uid"
EXTRA_PREFIX = "authentication.kubernetes.io/"
CACHE_MAX = 4096

# The object a key names, from the watch cache (else the store); None when there is none.
Getter = Callable[[str], Awaitable[dict[str, Any] | None]]


class ServiceAccountKeys:
    """The signing key, the issuer and the API audiences (kube-apiserver's --service-account-* flags)."""

    def __init__(self, pki: Path, issuer: str = sa_token.DEFAULT_ISSUER,
                 api_audiences: Sequence[str] = ()) -> None:
        self.private_key: PrivateKeyTypes
        self.private_key, _ = ensure_sa_keys(pki)
        sa_token.algorithm(self.private_key)  # refuses a key that cannot sign tokens, at start
        self.public_keys: list[PublicKeyTypes] = [self.private_key.public_key()]
        self.issuer = issuer
        self.api_audiences = list(api_audiences) or [issuer]
        self.jwks_uri = ""  # https://<the advertised address>/openid/v1/jwks, once the server listens

    def sign(self, claims: dict[str, Any]) -> str:
        return sa_token.sign(self.private_key, claims)


class ServiceAccountAuthenticator:
    def __init__(self, keys: ServiceAccountKeys, get: Getter, clock: Clock = REAL_CLOCK) -> None:
        self.keys = keys
        self.get = get
        self.clock = clock
        self._verified: dict[str, dict[str, Any]] = {}

    async def authenticate(self, header: str | None) -> auth.User | None:
        """The ServiceAccount a valid token names; None for a token that is not ours or not valid."""
        if not header or not header.startswith("Bearer "):
            return None
        try:
            found = await self.review(header[7:].strip(), ())
        except sa_token.TokenInvalid as e:
            log.info("ServiceAccount token refused: %s", e)
            return None
        return None if found is None else found[0]

    async def review(self, token: str, audiences: Sequence[str]) -> tuple[auth.User, list[str]] | None:
        """The user a token names and the audiences it holds of those asked for (the API's when none are),
        as kube-apiserver's JWT authenticator: None for a token that is not ours, TokenInvalid (with the
        reason TokenReview reports) for one that is ours and not valid."""
        claims = self._verified.get(token)
        if claims is None:  # not seen yet: ours at all (by its issuer), then its signature
            iss = sa_token.unverified_issuer(token)
            if iss is None or (iss != self.keys.issuer and iss != sa_token.LEGACY_ISSUER):
                return None
            claims = sa_token.verify(token, self.keys.public_keys, self.clock.now())
            if len(self._verified) >= CACHE_MAX:
                self._verified.clear()
            self._verified[token] = claims
        else:
            sa_token.check_times(claims, self.clock.now())
        held = sa_token.audiences(claims) or self.keys.api_audiences  # a legacy token: the API's only
        wanted = list(audiences) or self.keys.api_audiences
        auds = [a for a in wanted if a in held]
        if not auds:
            raise sa_token.TokenInvalid(f"token audiences {go_quoted(held)} is invalid for the target "
                                        f"audiences {go_quoted(wanted)}")
        if claims.get("iss") == sa_token.LEGACY_ISSUER:
            return await self._legacy(token, claims), auds
        return await self._bound(claims), auds

    async def _live(self, key: str, ref: Any, what: str) -> dict[str, Any]:
        """The object at `key`, present with the uid `ref` names and not being deleted."""
        obj = await self.get(key)
        if obj is None:
            raise sa_token.TokenInvalid(f"{what} {key} no longer exists")
        m = obj["metadata"]
        if isinstance(ref, dict) and ref.get("uid") and m.get("uid") != ref.get("uid"):
            raise sa_token.TokenInvalid(f"{what} {key}: uid {m.get('uid')} is not the token's {ref['uid']}")
        deleting = m.get("deletionTimestamp")
        if deleting and parse_rfc3339(deleting) < self.clock.now() - sa_token.LEEWAY:
            raise sa_token.TokenInvalid(f"{what} {key} was deleted at {deleting}")  # kube's 60 s grace
        return obj

    async def _bound(self, claims: dict[str, Any]) -> auth.User:
        kube = claims.get(sa_token.KUBE_CLAIM)
        if not isinstance(kube, dict) or not isinstance(kube.get("serviceaccount"), dict):
            raise sa_token.TokenInvalid("no kubernetes.io claim")
        ns, sa_ref = kube.get("namespace") or "", kube["serviceaccount"]
        if claims.get("sub") != sa_token.username(ns, sa_ref.get("name", "")):
            raise sa_token.TokenInvalid(f"subject {claims.get('sub')} does not match its claims")
        sa = await self._live(SERVICE_ACCOUNTS.key(ns, sa_ref.get("name", "")), sa_ref, "serviceaccount")
        extra: list[tuple[str, tuple[str, ...]]] = []
        if isinstance(kube.get("pod"), dict):
            pod = kube["pod"]
            await self._live(PODS.key(ns, pod.get("name", "")), pod, "pod")
            extra += [(EXTRA_PREFIX + "pod-name", (pod.get("name", ""),)),
                      (EXTRA_PREFIX + "pod-uid", (pod.get("uid", ""),))]
        if isinstance(kube.get("secret"), dict):
            sec = kube["secret"]
            await self._live(SECRETS.key(ns, sec.get("name", "")), sec, "secret")
        if isinstance(kube.get("node"), dict):
            node = kube["node"]
            if "pod" not in kube:  # a pod's node rides along; only a node-bound token needs its node
                await self._live(NODES.key(None, node.get("name", "")), node, "node")
            extra += [(EXTRA_PREFIX + "node-name", (node.get("name", ""),)),
                      (EXTRA_PREFIX + "node-uid", (node.get("uid", ""),))]
        if claims.get("jti"):
            extra.append((EXTRA_PREFIX + "credential-id", (f"JTI={claims['jti']}",)))
        return self._user(ns, sa, tuple(sorted(extra)))

    async def _legacy(self, token: str, claims: dict[str, Any]) -> auth.User:
        p = sa_token.LEGACY
        ns, name = claims.get(p + "namespace") or "", claims.get(p + "service-account.name") or ""
        if claims.get("sub") != sa_token.username(ns, name):
            raise sa_token.TokenInvalid(f"subject {claims.get('sub')} does not match its claims")
        sa = await self._live(SERVICE_ACCOUNTS.key(ns, name),
                              {"uid": claims.get(p + "service-account.uid")}, "serviceaccount")
        secret = await self._live(SECRETS.key(ns, claims.get(p + "secret.name") or ""), {}, "secret")
        if (secret.get("data") or {}).get("token") != _b64(token):
            raise sa_token.TokenInvalid(f"secret {ns}/{secret['metadata']['name']} no longer holds it")
        return self._user(ns, sa, ())

    @staticmethod
    def _user(ns: str, sa: dict[str, Any], extra: tuple[tuple[str, tuple[str, ...]], ...]) -> auth.User:
        m = sa["metadata"]
        return auth.User(sa_token.username(ns, m["name"]), sa_token.groups(ns), m.get("uid", ""), extra)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def go_quoted(items: Sequence[str]) -> str:
    """A list of strings as Go's %q prints a []string (kube's messages carry them so)."""
    return "[" + " ".join(json.dumps(i) for i in items) + "]"
