"""Registry authentication: WWW-Authenticate challenges, Docker's token flow, basic credentials.

Docker Hub answers an anonymous request with 401 and `WWW-Authenticate: Bearer realm=...,service=...,
scope=...`; the client then asks the realm for a token (with basic credentials if it has them, or an
OAuth2 refresh-token POST for an identity token) and retries with `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import base64
import re
from ssl import SSLContext

import aiohttp

from cri.images.errors import AuthError
from cri.images.registries import AuthConfig

_PARAM = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """('bearer'|'basic'|..., params) from a WWW-Authenticate header value."""
    scheme, _, rest = header.strip().partition(" ")
    params = {m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3)).replace('\\"', '"')
              for m in _PARAM.finditer(rest)}
    return scheme.lower(), params


def basic_header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def authorize(http: aiohttp.ClientSession, challenge: str, auth: AuthConfig | None, repository: str,
                    ssl: SSLContext | bool = True) -> str:
    """The Authorization header value answering `challenge`; AuthError if it cannot be answered."""
    scheme, params = parse_challenge(challenge)
    creds = auth.basic() if auth else None
    if scheme == "basic":
        if not creds:
            raise AuthError("the registry wants basic credentials and none are configured")
        return basic_header(*creds)
    if scheme != "bearer":
        raise AuthError(f"unsupported authentication scheme {scheme!r}")
    if auth and auth.registry_token:
        return f"Bearer {auth.registry_token}"
    realm = params.get("realm")
    if not realm:
        raise AuthError("bearer challenge without a realm")
    scope = params.get("scope") or f"repository:{repository}:pull"
    service = params.get("service", "")
    try:
        if auth and auth.identity_token:
            form = {"grant_type": "refresh_token", "refresh_token": auth.identity_token, "service": service,
                    "scope": scope, "client_id": "nodeagent"}
            async with http.post(realm, data=form, ssl=ssl) as resp:
                body = await _token_body(resp)
        else:
            query = {"scope": scope}
            if service:
                query["service"] = service
            headers = {"Authorization": basic_header(*creds)} if creds else {}
            async with http.get(realm, params=query, headers=headers, ssl=ssl) as resp:
                body = await _token_body(resp)
    except aiohttp.ClientError as e:
        raise AuthError(f"token endpoint {realm}: {e}") from None
    token = body.get("token") or body.get("access_token")
    if not token:
        raise AuthError(f"token endpoint {realm} returned no token")
    return f"Bearer {token}"


async def _token_body(resp: aiohttp.ClientResponse) -> dict:
    if resp.status in (401, 403):
        raise AuthError(f"token endpoint refused the credentials (HTTP {resp.status})")
    if resp.status != 200:
        raise AuthError(f"token endpoint answered HTTP {resp.status}")
    try:
        body = await resp.json(content_type=None)
    except ValueError:
        raise AuthError("token endpoint answered with something that is not JSON") from None
    return body if isinstance(body, dict) else {}
