"""Async REST client: typed verbs over HTTPS with bearer tokens, Status errors raised as ClientError."""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson
import yaml

from nodeagent.api.resources import RESOURCES, Resource, all_resources
from nodeagent.client import in_process, local_socket
from nodeagent.client.ratelimit import TokenBucket

MAX_RETRIES = 10  # client-go's: answers with Retry-After (429, 5xx) are tried again this many times
PATCH_TYPES = {"merge": "application/merge-patch+json", "strategic": "application/strategic-merge-patch+json",
               "json": "application/json-patch+json", "apply": "application/apply-patch+yaml"}
# client-go's metadata client: lists as PartialObjectMetadataList, watch events' objects as
# PartialObjectMetadata (only ObjectMeta), plain JSON where a server transforms nothing
METADATA_LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
METADATA_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
PARTIAL = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1"}


def load_cert_chain_data(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """A certificate and key held in memory loaded into `ctx`: OpenSSL's API here takes paths, so they go
    through anonymous memory files (never written to a disk)."""
    fds = [os.memfd_create(name, os.MFD_CLOEXEC) for name in ("client-cert", "client-key")]
    try:
        for fd, pem in zip(fds, (cert, key), strict=True):
            os.write(fd, pem)
        ctx.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
    finally:
        for fd in fds:
            os.close(fd)


class ClientError(Exception):
    """A Kubernetes Status failure (or a transport failure, code 0) from the apiserver."""

    def __init__(self, code: int, reason: str, message: str, status: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code, self.reason, self.message, self.status = code, reason, message, status or {}

    @property
    def not_found(self) -> bool:
        return self.code == 404

    @property
    def conflict(self) -> bool:
        return self.code == 409 and self.reason == "Conflict"

    @property
    def already_exists(self) -> bool:
        return self.code == 409 and self.reason == "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.code == 410


BUILTIN = frozenset(RESOURCES)
_BUILTIN_RESOLVED: dict[str, Resource] = {}  # every call resolved the name by scanning every resource


def resolve(resource: str | Resource) -> Resource:
    """'pods', 'deployments', 'deployments.apps', 'apps/v1/deployments' or 'v1/pods' -> the Resource."""
    if isinstance(resource, Resource):
        return resource
    known = _BUILTIN_RESOLVED.get(resource)
    if known is not None:
        return known
    found = _resolve(resource)
    if found in BUILTIN:  # custom resources sort after built-in ones: this answer can never change
        _BUILTIN_RESOLVED[resource] = found
    return found


def _resolve(resource: str) -> Resource:
    if "/" in resource:
        gv, _, name = resource.rpartition("/")
        group, _, version = gv.rpartition("/")
        hits = [r for r in all_resources() if r.name == name and r.group == group and r.version == version]
        if not hits:  # a custom resource not seen defined here: namespaced when a namespace is given
            return Resource(group, version, name, "")
    else:
        name, _, group = resource.partition(".")
        hits = [r for r in all_resources() if r.name == name and (r.group == group or not group)]
        hits.sort(key=lambda r: r.group != ""
                  and r.group != "apps")  # core and apps win ties, as kubectl does
    if not hits:
        raise ValueError(f"unknown resource {resource!r}")
    return hits[0]


def path_for(res: Resource, namespace: str | None = None, name: str | None = None,
             subresource: str = "") -> str:
    p = res.gv_path
    if res.namespaced and namespace:
        p += f"/namespaces/{namespace}"
    p += f"/{res.name}"
    if name:
        p += f"/{name}"
    if subresource:
        p += f"/{subresource}"
    return p


class Client:
    def __init__(self, server: str, token: str | None = None, ca_file: str | None = None,
                 ca_data: bytes | None = None, insecure: bool = False, max_connections: int = 32,
                 cert_file: str | None = None, key_file: str | None = None,
                 verify_hostname: bool = True, limiter: TokenBucket | None = None,
                 ssl_context: ssl.SSLContext | None = None, unix_socket: str | None = None,
                 cert_data: bytes | None = None, key_data: bytes | None = None,
                 local: in_process.Server | None = None) -> None:
        """`verify_hostname=False` trusts the CA alone: any name in the server's certificate (a joining node
        that pinned the cluster's CA, as kubeadm's discovery does). `limiter` makes every request (watches
        too, as client-go's) wait for its token (the kubelet's --kube-api-qps/--kube-api-burst).
        `ssl_context`: an existing one to use instead of the one these arguments make. `unix_socket`: the
        same apiserver's root-only local socket (`local_socket`), used for every request instead of
        `server`, which stays what the client names (for those that reach the server's address).
        `cert_data`/`key_data`: a client certificate and key given inline (a kubeconfig's `-data` fields).
        `local`: the apiserver of this very process (`in_process`), called directly for every request but
        the streamed subresources; without it, the one registered in this process under `unix_socket`, if
        any, looked up on each call (an apiserver stopped and started again under the same socket is the
        new one, as a reconnection would reach). Never with a client certificate (that identity is the TLS
        session's)."""
        self.server = server.rstrip("/")
        self.unix_socket = unix_socket
        self._certified = bool(cert_file or cert_data)
        self._local = local
        self._base = local_socket.BASE_URL if unix_socket else self.server
        self.token: str | None = None
        # who this client is to the server: clients alike here may share one informer (informer.shared)
        self.identity = (self.server, token, cert_file or cert_data, insecure)
        ctx: ssl.SSLContext | None = ssl_context
        if ctx is None and self.server.startswith("https"):
            ctx = ssl.create_default_context(cafile=ca_file, cadata=ca_data.decode() if ca_data else None)
            if insecure or not verify_hostname:
                ctx.check_hostname = False
            if insecure:
                ctx.verify_mode = ssl.CERT_NONE
            if cert_data:  # x509 client authentication given inline
                load_cert_chain_data(ctx, cert_data, key_data or cert_data)
            elif cert_file:  # x509 client authentication (a joined node's own certificate)
                ctx.load_cert_chain(cert_file, key_file)
        self._ssl = ctx
        self._limit = max_connections
        self.limiter = limiter
        self._session: aiohttp.ClientSession | None = None
        self._auth_headers: dict[str, str] = {}
        self.set_token(token)

    @classmethod
    def from_kubeconfig(cls, path: str | Path, **kw: Any) -> Client:
        """The current context's cluster and user, as kubectl reads them: file paths relative to the
        kubeconfig's directory, and the inline `-data` fields (which take the place of the files)."""
        path = Path(path)
        cfg = yaml.safe_load(path.read_text())
        ctx_name = cfg.get("current-context")
        ctx = next((c["context"] for c in cfg.get("contexts", []) if c["name"] == ctx_name),
                   cfg["contexts"][0]["context"])
        cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
        user: dict[str, Any] = next(
            (u["user"] for u in cfg.get("users", []) if u["name"] == ctx.get("user")), {})

        def local(key: str, within: dict[str, Any]) -> str | None:
            value = within.get(key)
            return str(path.parent / value) if value else None  # an absolute value stays itself

        def inline(key: str, within: dict[str, Any]) -> bytes | None:
            value = within.get(key)
            return base64.b64decode(value) if value else None

        token = user.get("token")
        token_file = local("tokenFile", user)
        if not token and token_file:
            token = Path(token_file).read_text().strip()
        return cls(cluster["server"], token,
                   ca_file=local("certificate-authority", cluster),
                   ca_data=inline("certificate-authority-data", cluster),
                   insecure=bool(cluster.get("insecure-skip-tls-verify")),
                   cert_file=local("client-certificate", user), key_file=local("client-key", user),
                   cert_data=inline("client-certificate-data", user),
                   key_data=inline("client-key-data", user),
                   unix_socket=local_socket.usable(cluster), **kw)

    def with_token(self, token: str) -> Client:
        """A client of the same server and CA that authenticates with `token` (a ServiceAccount's)."""
        # this client's TLS context, not a new one: making one loads the system's CA store (~50 ms)
        return Client(self.server, token, max_connections=self._limit, ssl_context=self._ssl,
                      unix_socket=self.unix_socket, local=self._local)

    def own_pool(self, max_connections: int | None = None) -> Client:
        """The same user (same identity, credentials and limiter) through connections of its own: for
        long-running watches that must not take the connections this client's requests wait for.
        `max_connections`: its own limit (0: none, for a pool of watches whose number discovery sets)."""
        limit = self._limit if max_connections is None else max_connections
        other = Client(self.server, self.token, max_connections=limit, limiter=self.limiter,
                       ssl_context=self._ssl, unix_socket=self.unix_socket, local=self._local)
        other.identity = self.identity
        return other

    @property
    def local(self) -> in_process.Server | None:
        """The apiserver this client calls in-process, if any (else HTTPS or the local socket)."""
        if self._certified:
            return None
        return self._local if self._local is not None else in_process.servers.lookup(self.unix_socket)

    def set_token(self, token: str | None) -> None:
        """A refreshed bearer token: used from the next request on (`request` sends it on every call)."""
        self.token = token
        # built once per token, not once per request
        self._auth_headers = {"Authorization": f"Bearer {token}"} if token else {}

    def _sess(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # the credential goes with each request (`set_token` may change it), not with the session
            headers = _SESSION_HEADERS
            connector: aiohttp.BaseConnector
            if self.unix_socket:
                connector = aiohttp.UnixConnector(self.unix_socket, limit=self._limit)
            else:
                connector = aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else False,
                                                 limit=self._limit)
            self._session = aiohttp.ClientSession(connector=connector, headers=headers,
                                                  timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None,
                      content_type: str = "application/json", deadline: float = 60,
                      accept: str | None = None) -> Any:
        data = None
        headers = self._auth_headers if accept is None else {**self._auth_headers, "Accept": accept}
        if body is not None:
            data = body if isinstance(body, bytes) else _dumps(body)
            headers = {**headers, "Content-Type": content_type}
        query = _clean(params)
        local = self.local
        if local is not None and in_process.streamed(path):
            local = None
        for attempt in range(MAX_RETRIES + 1):
            if self.limiter is not None:
                await self.limiter.wait()
            try:
                if local is not None:
                    got = await local.call(method, path, {k: str(v) for k, v in query.items()},
                                           {**_SESSION_HEADERS, **headers}, data, deadline)
                else:
                    got = await self._http(method, path, query, data, headers, deadline)
            except (aiohttp.ClientError, ConnectionError) as e:
                raise ClientError(0, "ConnectionError", str(e)) from e
            except TimeoutError:  # the deadline: aiohttp raises a bare TimeoutError, not one of its own
                raise ClientError(0, "Timeout", f"{method} {path}: no answer within {deadline:g} s") from None
            wait = retry_after(got.status, got.headers.get("Retry-After"))
            if wait is not None and attempt < MAX_RETRIES:
                await asyncio.sleep(wait)  # the server asked: try again, as client-go does
                continue
            if got.status >= 400:
                raise _error(got.status, got.body)
            if got.content_type == "application/json":
                return _loads(got.body)
            return got.body.decode(errors="replace")
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _http(self, method: str, path: str, query: dict[str, Any], data: bytes | None,
                    headers: dict[str, str], deadline: float) -> in_process.Answer:
        """One request over HTTP(S) or the local socket, answered as the in-process entry answers."""
        url = self._base + path + ("?" + urlencode(query) if query else "")
        async with self._sess().request(method, url, data=data, headers=headers,
                                        timeout=_timeout(deadline)) as r:
            raw = await r.read()
            return in_process.Answer(r.status, r.headers, raw, r.content_type)

    # ------------------------------------------------------------------ verbs
    async def get(self, resource: str | Resource, name: str, namespace: str | None = None,
                  subresource: str = "") -> dict[str, Any]:
        return await self.request("GET", path_for(resolve(resource), namespace, name, subresource))

    async def list(self, resource: str | Resource, namespace: str | None = None,
                   label_selector: str | None = None, field_selector: str | None = None,
                   limit: int | None = None, resource_version: str | None = None,
                   metadata_only: bool = False) -> dict[str, Any]:
        """The whole list (following `continue` when `limit` pages it; when the server can no longer
        continue at the first page's revision, 410, one list without a limit, as client-go's pager does
        with FullListIfExpired). With `metadata_only`, a PartialObjectMetadataList, as client-go's metadata
        client lists (its items only ObjectMeta, even from a server that sends whole objects)."""
        res = resolve(resource)
        params = {"labelSelector": label_selector, "fieldSelector": field_selector, "limit": limit,
                  "resourceVersion": resource_version}
        accept = METADATA_LIST_ACCEPT if metadata_only else None
        path = path_for(res, namespace)
        out = await self.request("GET", path, params=params, accept=accept)
        while limit and out["metadata"].get("continue"):
            try:
                more = await self.request("GET", path, accept=accept,
                                          params={**params, "continue": out["metadata"]["continue"]})
            except ClientError as e:
                if not e.gone:
                    raise
                out = await self.request("GET", path, params={**params, "limit": None}, accept=accept)
                break
            out["items"] += more["items"]
            out["metadata"] = more["metadata"]
        if metadata_only and out.get("kind") != "PartialObjectMetadataList":
            out = {"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                   "metadata": out.get("metadata") or {}, "items": [as_partial(o) for o in out["items"]]}
        return out

    async def create(self, resource: str | Resource, obj: dict[str, Any], namespace: str | None = None,
                     subresource: str = "", name: str | None = None) -> dict[str, Any]:
        res = resolve(resource)
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        return await self.request("POST", path_for(res, ns, name if subresource else None, subresource), obj)

    async def update(self, resource: str | Resource, obj: dict[str, Any], namespace: str | None = None,
                     subresource: str = "") -> dict[str, Any]:
        res = resolve(resource)
        meta = obj.get("metadata") or {}
        path = path_for(res, namespace or meta.get("namespace"), meta["name"], subresource)
        return await self.request("PUT", path, obj)

    async def update_status(self, resource: str | Resource, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.update(resource, obj, subresource="status")

    async def patch(self, resource: str | Resource, name: str, patch: Any, namespace: str | None = None,
                    patch_type: str = "merge", subresource: str = "", field_manager: str | None = None,
                    force: bool | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"fieldManager": field_manager}
        if force is not None:
            params["force"] = "true" if force else "false"
        return await self.request("PATCH", path_for(resolve(resource), namespace, name, subresource), patch,
                                  params=params, content_type=PATCH_TYPES.get(patch_type, patch_type))

    async def apply(self, resource: str | Resource, obj: dict[str, Any], field_manager: str,
                    namespace: str | None = None, force: bool = False,
                    subresource: str = "") -> dict[str, Any]:
        """Server-side apply of `obj` (created when absent)."""
        meta = obj.get("metadata") or {}
        return await self.patch(resource, meta["name"], obj, namespace or meta.get("namespace"), "apply",
                                subresource, field_manager, force)

    async def delete(self, resource: str | Resource, name: str, namespace: str | None = None,
                     grace_period: int | None = None, propagation: str | None = None,
                     preconditions: dict[str, str] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if grace_period is not None:
            body["gracePeriodSeconds"] = grace_period
        if propagation:
            body["propagationPolicy"] = propagation
        if preconditions:
            body["preconditions"] = preconditions
        return await self.request("DELETE", path_for(resolve(resource), namespace, name), body)

    async def bind(self, namespace: str, pod: str, node: str) -> dict[str, Any]:
        return await self.create("pods", {"apiVersion": "v1", "kind": "Binding",
                                          "metadata": {"name": pod, "namespace": namespace},
                                          "target": {"apiVersion": "v1", "kind": "Node", "name": node}},
                                 namespace, "binding", pod)

    async def evict(self, namespace: str, pod: str, grace_period: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": pod, "namespace": namespace}}
        if grace_period is not None:
            body["deleteOptions"] = {"gracePeriodSeconds": grace_period}
        return await self.create("pods", body, namespace, "eviction", pod)

    async def watch(self, resource: str | Resource, namespace: str | None = None,
                    resource_version: str | None = None, label_selector: str | None = None,
                    field_selector: str | None = None, timeout_seconds: int | None = None,
                    bookmarks: bool = True, metadata_only: bool = False) -> AsyncIterator[dict[str, Any]]:
        """Watch events as dicts {type, object}; an ERROR event is raised as ClientError (410 -> .gone).
        With `metadata_only`, each object a PartialObjectMetadata (client-go's metadata client's watch)."""
        res = resolve(resource)
        params = {"watch": "1", "resourceVersion": resource_version, "labelSelector": label_selector,
                  "fieldSelector": field_selector, "timeoutSeconds": timeout_seconds,
                  "allowWatchBookmarks": "true" if bookmarks else None}
        query = _clean(params)
        path = path_for(res, namespace)
        headers = {**self._auth_headers, "Accept": METADATA_ACCEPT} if metadata_only else self._auth_headers
        if self.limiter is not None:
            await self.limiter.wait()
        try:
            local = self.local
            if local is not None:
                got, chunks = await local.watch(path, {k: str(v) for k, v in query.items()},
                                                     {**_SESSION_HEADERS, **headers})
                if chunks is None:
                    raise _error(got.status, got.body)
                try:
                    async for ev in _events(chunks):
                        yield _metadata_event(ev) if metadata_only else ev
                finally:
                    await chunks.aclose()
                return
            url = self._base + path + "?" + urlencode(query)
            async with self._sess().get(url, headers=headers, timeout=_WATCH_TIMEOUT) as r:
                if r.status >= 400:
                    raise _error(r.status, await r.read())
                async for ev in _events(r.content.iter_any()):
                    yield _metadata_event(ev) if metadata_only else ev
        except (aiohttp.ClientError, ConnectionError) as e:
            raise ClientError(0, "ConnectionError", str(e)) from e


async def _events(chunks: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
    """A watch stream's events, from its chunks as they come; an ERROR event is raised as ClientError."""
    buf = b""
    async for chunk in chunks:
        # a chunk may hold many events (the server writes a turn's events at once): split it once, not
        # once per event (which copied the rest of the chunk each time)
        *lines, buf = (buf + chunk).split(b"\n")
        for line in lines:
            if not line.strip():
                continue
            ev = _loads(line)
            if ev.get("type") == "ERROR":
                st = ev.get("object") or {}
                raise ClientError(st.get("code", 500), st.get("reason", ""), st.get("message", ""), st)
            yield ev


def _metadata_event(ev: dict[str, Any]) -> dict[str, Any]:
    """A metadata-only watch's event with only ObjectMeta in its object, even from a server that sent the
    whole object (as client-go's metadata client keeps)."""
    obj = ev.get("object") or {}
    if obj.get("kind") != "PartialObjectMetadata":
        ev["object"] = as_partial(obj)
    return ev


def retry_after(status: int, header: str | None) -> float | None:
    """Seconds to wait before trying again when the server answered 429 or 5xx with Retry-After (an
    overloaded apiserver's max-in-flight refusal), else None: client-go's checkWait."""
    if header is None or not (status == 429 or status >= 500):
        return None
    try:
        return max(0.0, float(int(header)))
    except ValueError:
        return None


def _dumps(body: Any) -> bytes:
    """A request body: orjson (several times the stdlib's speed; every bind and event goes through it), else
    the stdlib for what orjson refuses (non-string keys, integers past 64 bits)."""
    try:
        return orjson.dumps(body)
    except TypeError:
        return json.dumps(body).encode()


def _loads(raw: bytes) -> Any:
    """orjson, which reuses one string per repeated key across the objects it decodes (informer caches
    hold a quarter less), else the stdlib for what orjson refuses (NaN, lone surrogates)."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


_SESSION_HEADERS = {"Accept": "application/json", "User-Agent": "nodeagent-client"}
_WATCH_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_read=None)


@functools.lru_cache(maxsize=16)
def _timeout(total: float) -> aiohttp.ClientTimeout:
    """One (immutable) ClientTimeout per deadline, not one made per request."""
    return aiohttp.ClientTimeout(total=total)


def as_partial(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as a PartialObjectMetadata: its ObjectMeta only (what a metadata-only cache keeps of an
    object a server sent whole)."""
    return {**PARTIAL, "metadata": obj.get("metadata") or {}}


def _clean(params: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (params or {}).items() if v is not None}


def _error(code: int, raw: bytes) -> ClientError:
    try:
        st = json.loads(raw)
        return ClientError(st.get("code", code), st.get("reason", ""), st.get("message", ""), st)
    except ValueError:
        return ClientError(code, "", raw.decode(errors="replace")[:500])


__all__ = ["Client", "ClientError", "resolve", "path_for"]
