"""The HTTP boundary: authenticate, parse, authorize, call the registry, encode (JSON, Table, watch stream).

Every failure leaves here as a Kubernetes Status with its code; nothing below maps errors to HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from aiohttp import web

from nodeagent.api import sa_token
from nodeagent.api.resources import METRICS_GROUP, VIRTUAL, Resource, is_custom
from nodeagent.api.selectors import SelectorError, parse_field_selector, parse_label_selector
from nodeagent.api.status import status_body
from nodeagent.apiserver import (
    auth,
    bootstrap_auth,
    codec,
    discovery,
    errors,
    field_validation,
    inflight,
    list_options,
    openapi_http,
    patching,
    subresources,
    table,
    versions,
    webhooks,
)
from nodeagent.apiserver.authn import token_request
from nodeagent.apiserver.authn.serviceaccount import ServiceAccountAuthenticator
from nodeagent.apiserver.authz import impersonation, reviews
from nodeagent.apiserver.authz.attributes import (
    AUTHENTICATED_GROUP,
    Attributes,
    forbidden_message,
)
from nodeagent.apiserver.authz.chain import Authorizer
from nodeagent.apiserver.authz.escalation import REQUESTER
from nodeagent.apiserver.bootstrap_auth import BootstrapTokenAuthenticator
from nodeagent.apiserver.cache import Entry, WatchCache
from nodeagent.apiserver.codec import JSON, json_response
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.incoming import ApiRequest, open_watch
from nodeagent.apiserver.join_token import JoinTokens
from nodeagent.apiserver.metrics import Metrics
from nodeagent.apiserver.metrics_api import MetricsAPI
from nodeagent.apiserver.openapi import OpenAPI
from nodeagent.apiserver.registry import (
    PODS,
    Registry,
    check_field_selector,
    matches,
)
from nodeagent.apiserver.request import RequestInfo, parse
from nodeagent.apiserver.watch import FRESH_WAIT_S, TOO_LARGE_RETRY_S, watch_events
from nodeagent.store import base as store_base

log = logging.getLogger("nodeagent.apiserver")

MAX_BODY = 3 * 1024 * 1024
# a watcher gets at most one write per this many seconds; events in between go out together (a write per
# event per watcher, each a TLS record and a syscall waking the reader, was the fan-out's cost in a burst)
WATCH_COALESCE_S = 0.002
_PUBLIC = {"/version", "/version/", "/healthz", "/livez", "/readyz"}
_RETURNS_OBJECT_ON_DELETE = {"pods", "namespaces", "services", "nodes"}
ANONYMOUS_GROUP = "system:unauthenticated"
OIDC_CONFIG, OIDC_JWKS = "/.well-known/openid-configuration", "/openid/v1/jwks"


def status_response(e: ApiError) -> web.Response:
    resp = json_response(e.status(), e.code)
    retry = (e.details or {}).get("retryAfterSeconds")
    if retry:
        resp.headers["Retry-After"] = str(retry)  # as kube-apiserver's ErrorNegotiated sets it
    return resp


def success_status(res: Resource, obj: dict[str, Any]) -> dict[str, Any]:
    details = {"name": obj["metadata"]["name"], "kind": res.name, "uid": obj["metadata"].get("uid", "")}
    if res.group:
        details["group"] = res.group
    return status_body("Success", details=details)


def _warned(resp: web.StreamResponse, warnings: list[str]) -> web.StreamResponse:
    for w in warnings:
        resp.headers.add("Warning", field_validation.warning_header(w))
    return resp


def with_authenticated(user: auth.User) -> auth.User:
    """An authenticated user is also in system:authenticated (kube's authenticator group adder)."""
    if AUTHENTICATED_GROUP in user.groups:
        return user
    return auth.User(user.name, user.groups + (AUTHENTICATED_GROUP,), user.uid, user.extra)


_PLAIN_TYPES = ("json", "*/*", "yaml", "protobuf")
NOT_ACCEPTABLE = ("only the following media types are accepted: application/json, application/yaml, "
                  "application/vnd.kubernetes.protobuf")


class Wants:
    """What the Accept header asks for: plain JSON, a Table, or PartialObjectMetadata."""

    def __init__(self, accept: str) -> None:
        self.table = "as=Table" in accept
        self.partial = not self.table and "as=PartialObjectMetadata" in accept
        # which of the two kube transforms to: an object (GET, watch events) or a list; the other is 406
        self.partial_list = self.partial and "as=PartialObjectMetadataList" in accept
        # an alternative the client takes as it is (no `as=` transform): what a refused transform falls to
        self.plain_fallback = any("as=" not in alt and any(t in alt for t in _PLAIN_TYPES)
                                  for alt in accept.split(","))
        if not self.table and not self.partial and accept and not any(t in accept for t in _PLAIN_TYPES):
            raise errors.not_acceptable(f"{NOT_ACCEPTABLE} (got {accept})")

    def no_table(self) -> None:
        """This endpoint serves no Table (a WatchList, as kube's watchListEndpointRestrictions): the client's
        next choice without a transform, else 406 as kube's negotiation answers."""
        if self.table:
            if not self.plain_fallback:
                raise errors.not_acceptable(NOT_ACCEPTABLE)
            self.table = False


def partial_object(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as kube's metadata transform returns it (meta.AsPartialObjectMetadata): its whole
    ObjectMeta under the PartialObjectMetadata kind."""
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]}


class Handlers:
    def __init__(self, registry: Registry, cache: WatchCache, tokens: auth.TokenFile, address: str,
                 kubelet_proxy: subresources.KubeletProxy | None = None,
                 bootstrap_tokens: BootstrapTokenAuthenticator | None = None,
                 join_tokens: JoinTokens | None = None, metrics_api: MetricsAPI | None = None,
                 service_accounts: ServiceAccountAuthenticator | None = None,
                 authorizer: Authorizer | None = None) -> None:
        # Node,RBAC over the watch cache; None (tests of the HTTP layer alone): everyone is authorized
        self.authorizer = authorizer
        self.service_accounts = service_accounts  # ServiceAccount JWTs: their authenticator and signer
        self.bootstrap_tokens = bootstrap_tokens
        self.metrics_api = metrics_api  # metrics.k8s.io (None: the group answers 503)
        self.join_tokens = join_tokens  # signs cluster-info for a new token at once
        self.registry = registry
        self.cache = cache
        self.store = registry.store
        self.tokens = tokens
        self.address = address
        self.kubelet_proxy = kubelet_proxy
        self.metrics = Metrics()
        self.inflight = inflight.InFlightLimit(0, 0, self.metrics)  # the server sets kube's limits
        self.openapi = OpenAPI()

    # ------------------------------------------------------------------ entry
    async def handle(self, request: ApiRequest) -> web.StreamResponse:
        try:
            return await self._handle(request)
        except ApiError as e:
            return status_response(e)
        except inflight.TooManyRequests:
            code, body, headers = inflight.plain_answer()
            return web.Response(status=code, body=body, headers=headers)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:  # a bug: answer 500 with a Status and log the trace
            log.exception("%s %s", request.method, request.path_qs)
            return status_response(errors.internal(str(e)))

    async def _handle(self, request: ApiRequest) -> web.StreamResponse:
        path = request.path
        if path in _PUBLIC:
            if path.startswith("/version"):
                return json_response(discovery.version_info())
            return web.Response(text="ok")
        user = await self._authenticate(request)
        if impersonation.requested(request.headers) and self.authorizer is not None:
            user = await impersonation.impersonate(request.headers, user, self.authorizer)
        REQUESTER.set(user)  # this request's task: escalation checks on RBAC writes read it
        with self.inflight.admit(inflight.request_kind(request.method, path, request.query), user.groups):
            return await self._serve(request, user)

    async def _serve(self, request: ApiRequest, user: auth.User) -> web.StreamResponse:
        """An authenticated request within the in-flight limits: /metrics, discovery or a resource."""
        path, query = request.path, request.query
        if path in (OIDC_CONFIG, OIDC_JWKS):
            await self._authorize_path(user, "get", path)
            return self._oidc(path)
        if path == "/metrics":
            await self._authorize_path(user, request.method.lower(), path)
            return web.Response(body=self.metrics.render(), content_type="text/plain")
        try:
            info = parse(request.method, path, query)
        except ApiError as e:
            if e.code != 404:
                raise
            await self.cache.wait_fresh()  # a CustomResourceDefinition written a moment ago may serve it
            info = parse(request.method, path, query)
        if info is None:
            await self._authorize_path(user, request.method.lower(), path)
        if info is None:
            return await self._discovery(request, path)
        t0 = time.perf_counter()
        code = 500
        try:
            resp = await self._resource(request, info, user)
            code = resp.status
            return resp
        except ApiError as e:
            code = e.code
            raise
        finally:
            r = info.resource
            took = time.perf_counter() - t0
            # kube's CleanScope: one object (or a create), a namespace, or the whole cluster
            scope = "resource" if info.name or info.verb == "create" else (
                "namespace" if info.namespace else "cluster")
            self.metrics.observe(info.verb, r.group, r.name, info.subresource, code, took, scope)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s %s %s %d %.1fms", user.name, request.method, request.path_qs, code, took * 1000)

    async def _discovery(self, request: ApiRequest, path: str) -> web.StreamResponse:
        p = path.rstrip("/")
        if request.method != "GET":
            raise errors.method_not_allowed()
        if p in ("/api", "/apis"):
            media = discovery.wants_aggregated(request.headers.get("Accept", ""))
            if media is not None:
                return web.Response(body=codec.dumps(discovery.aggregated(p == "/api", media)),
                                    headers={"Content-Type": media, "Vary": "Accept"})
            if p == "/api":
                return json_response(discovery.api_versions(self.address))
            return json_response(discovery.api_group_list())
        if p in ("/openapi/v2", "/openapi/v3") or p.startswith("/openapi/v3/"):
            return await openapi_http.serve(self.openapi, request, p)
        parts = p.split("/")[1:]
        doc = None
        if len(parts) == 2 and parts[0] == "api":
            doc = discovery.resource_list("", parts[1])
        elif len(parts) == 2 and parts[0] == "apis":
            doc = discovery.api_group(parts[1])
        elif len(parts) == 3 and parts[0] == "apis":
            doc = discovery.resource_list(parts[1], parts[2])
        if doc is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return json_response(doc)

    # ------------------------------------------------------------------ resources
    async def _resource(self, request: ApiRequest, info: RequestInfo,
                        user: auth.User) -> web.StreamResponse:
        res, verb = info.resource, info.verb
        q = request.query
        dry_run = q.get("dryRun") == "All"
        wants = Wants(request.headers.get("Accept", ""))
        body: Any = None
        streaming = info.subresource in ("log", "exec", "attach", "portforward", "proxy")
        if streaming:
            pass  # the body (if any) is the stream itself, forwarded to the kubelet
        elif verb in ("create", "update", "patch") \
                or (verb in ("delete", "deletecollection") and request.can_read_body):
            body = await self._read_body(request, info, verb)
        await self._authorize(user, info, body, q.get("fieldSelector", ""))
        if res.name in VIRTUAL:
            out = await reviews.review(res.name, info.namespace or "", body, user,
                                       self._authorizer(), self._review_token)
            return json_response(out, 201)
        if res.group == METRICS_GROUP:
            return self._metrics_api_response(await self._metrics_api(info, q), res, wants, q)
        # who asks, for admission webhooks, and the warnings the response carries (this task's own context)
        scope = webhooks.RequestScope(user)
        webhooks.REQUEST.set(scope)
        warnings = scope.warnings
        if verb in ("create", "update", "patch") and not info.subresource:
            warnings += await field_validation.check(self.openapi, res, verb, q, body, info.patch_type)
        if versions.converted(res):
            return _warned(await self._converted(request, info, body, dry_run, wants), warnings)
        sub = info.subresource
        if sub == "token" and res.name == "serviceaccounts" and not res.group:
            if self.service_accounts is None:
                raise errors.not_found("serviceaccounts/token", info.name or "")
            out = await token_request.create(self.registry, self.service_accounts.keys, user,
                                             info.namespace or "", info.name or "", body)
            return json_response(out, 201)
        if sub:
            return _warned(await subresources.handle(self.registry, self.kubelet_proxy, request, info, body,
                                                     dry_run), warnings)
        if verb == "get":
            await self.cache.wait_fresh()
            entry = self.cache.get(res.key(info.namespace, info.name or ""))
            if entry is None:
                raise errors.not_found(res.name, info.name or "", res.group)
            if not wants.table and not wants.partial:
                return web.Response(body=entry.raw, content_type=JSON)
            return json_response(self._single(res, entry.obj, wants, q))
        if verb == "list":
            return await self._list(request, info, wants)
        if verb == "watch":
            return await self._watch(request, info, wants)
        if verb in ("create", "update", "patch"):
            return _warned(await self._write(request, info, user, body, dry_run, wants), warnings)
        if verb == "delete":
            opts = self._delete_options(q, body)
            obj = await self.registry.delete(res, info.namespace, info.name or "", opts, dry_run)
            pending = bool(obj["metadata"].get("deletionTimestamp")) and not dry_run
            still_there = pending and await self._exists(res, info.namespace, info.name or "")
            if res.name in _RETURNS_OBJECT_ON_DELETE or still_there:
                return _warned(json_response(obj, 202 if still_there else 200), warnings)
            return _warned(json_response(success_status(res, obj)), warnings)
        if verb == "deletecollection":
            opts = self._delete_options(q, body)
            items, _ = await self.registry.list(res, info.namespace, *self._selectors(res, q))
            for o in items:
                try:
                    await self.registry.delete(res, o["metadata"].get("namespace"),
                                               o["metadata"]["name"], opts, dry_run)
                except ApiError as e:
                    if e.code != 404:
                        raise
            return json_response(status_body("Success"))
        raise errors.method_not_allowed()

    async def _converted(self, request: ApiRequest, info: RequestInfo, body: Any, dry_run: bool,
                         wants: Wants) -> web.StreamResponse:
        """A resource served in a version it is not stored in (versions.py converts both ways)."""
        res, verb, sub, q = info.resource, info.verb, info.subresource, request.query
        conv = versions.ConvertedVerbs(self.registry, res)
        ns, name = info.namespace, info.name or ""
        if sub not in ("", "status"):
            raise errors.method_not_allowed()
        if verb == "get":
            return json_response(self._single(res, await conv.get(ns, name), wants, q))
        if verb == "list":
            return await self._list(request, info, wants, convert=conv)
        if verb == "watch":
            return await self._watch(request, info, wants, convert=conv)
        if verb == "create" and not sub:
            return json_response(self._single(res, await conv.create(ns, body, dry_run), wants, q), 201)
        if verb == "update":
            obj, created = await conv.update(ns, name, body, sub, dry_run)
            return json_response(self._single(res, obj, wants, q), 201 if created else 200)
        if verb == "patch":
            return json_response(self._single(res, await conv.patch(info, body, sub, dry_run), wants, q))
        if verb == "delete" and not sub:
            obj = await self.registry.delete(conv.storage, ns, name, self._delete_options(q, body), dry_run)
            return json_response(success_status(res, obj))
        if verb == "deletecollection" and not sub:
            opts = self._delete_options(q, body)
            items, _ = await self.registry.list(conv.storage, ns, *self._selectors(res, q))
            for o in items:
                with contextlib.suppress(ApiError):
                    await self.registry.delete(conv.storage, o["metadata"].get("namespace"),
                                               o["metadata"]["name"], opts, dry_run)
            return json_response(status_body("Success"))
        raise errors.method_not_allowed()

    async def _metrics_api(self, info: RequestInfo, q: Any) -> dict[str, Any]:
        if self.metrics_api is None:
            raise errors.service_unavailable("the metrics API is not served by this apiserver")
        return await self.metrics_api.handle(info, q)

    @staticmethod
    def _metrics_api_response(doc: dict[str, Any], res: Resource, wants: Wants, q: Any) -> web.Response:
        if wants.table:
            items = doc["items"] if "items" in doc else [doc]
            return json_response(table.table(res.kind, items, "", q.get("includeObject", "Metadata")))
        return json_response(doc)

    async def _exists(self, res: Resource, ns: str | None, name: str) -> bool:
        try:
            await self.store.get(res.key(ns, name))
            return True
        except store_base.NotFound:
            return False

    # ------------------------------------------------------------------ auth
    async def _authenticate(self, request: ApiRequest) -> auth.User:
        """Static token, else a client certificate from the cluster CA, else a bootstrap token, else a
        ServiceAccount token; every one is also in system:authenticated. A request with no credential at
        all is system:anonymous in system:unauthenticated (what RBAC grants it: kube-public/cluster-info)."""
        header = request.headers.get("Authorization")
        if header:  # the scheme is case-insensitive, as kube's bearer token authenticator reads it
            scheme, _, value = header.strip().partition(" ")
            if scheme.lower() == "bearer":  # the Python client's in-cluster config sends "bearer <token>"
                header = f"Bearer {value.strip()}"
        user = self.tokens.authenticate(header)
        if user is None and request.transport is not None:
            user = auth.cert_user(request.transport.get_extra_info("peercert"))
        if user is None and self.bootstrap_tokens is not None:
            user = await self.bootstrap_tokens.authenticate(header)
        if user is None and self.service_accounts is not None:
            user = await self.service_accounts.authenticate(header)
        if user is None:
            if header:
                raise errors.unauthorized()
            return auth.User("system:anonymous", (ANONYMOUS_GROUP,))
        return with_authenticated(user)

    def _oidc(self, path: str) -> web.Response:
        """The issuer's discovery document and keys (system:service-account-issuer-discovery grants them
        to ServiceAccounts; bind it to system:unauthenticated for public OIDC discovery, as on kube)."""
        if self.service_accounts is None:
            raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
        keys = self.service_accounts.keys
        if path == OIDC_JWKS:
            return web.Response(body=codec.dumps(sa_token.jwks(keys.public_keys)),
                                content_type="application/jwk-set+json")
        doc = sa_token.openid_configuration(keys.issuer, keys.jwks_uri)
        return json_response(doc)

    def _authorizer(self) -> Authorizer:
        if self.authorizer is None:
            raise errors.service_unavailable("authorization is not configured on this apiserver")
        return self.authorizer

    async def _authorize(self, user: auth.User, info: RequestInfo, body: Any,
                         field_selector: str = "") -> None:
        """The authorizer chain on a resource request; 403 with kube-apiserver's message when refused."""
        if self.authorizer is None:
            return
        res = info.resource
        a = Attributes(user, info.verb, True, res.group, res.name, info.subresource,
                       info.namespace or "", info.name or "", field_selector=field_selector)
        key = res.key(info.namespace, info.name) if info.name else None
        allowed, why = await self.authorizer.authorize(a, key, body)
        if not allowed:
            raise errors.forbidden(user.name, info.verb, a.combined_resource, res.group, info.namespace or "",
                                   info.name or "", why, kind=res.name)

    async def _authorize_path(self, user: auth.User, verb: str, path: str) -> None:
        if self.authorizer is None:
            return
        a = Attributes(user, verb, False, path=path)
        allowed, why = await self.authorizer.authorize(a)
        if not allowed:
            msg = f"forbidden: {forbidden_message(a)}" + (f": {why}" if why else "")
            raise ApiError(403, "Forbidden", msg, {})

    async def _review_token(self, token: str, audiences: list[str]) -> reviews.TokenResult:
        """TokenReview: who a bearer token is, by the authenticators requests use, for the audiences asked
        (the API's when none are). The audience-agnostic ones (static and bootstrap tokens) hold the API's
        audiences only, as kube's WrapAudienceAgnosticToken; a ServiceAccount token holds its `aud`."""
        implicit = self.service_accounts.keys.api_audiences if self.service_accounts is not None else []
        agnostic = [a for a in audiences or implicit if a in implicit]
        header = f"Bearer {token}"
        user = None
        if agnostic or not implicit:
            user = self.tokens.authenticate(header)
            if user is None and self.bootstrap_tokens is not None:
                user = await self.bootstrap_tokens.authenticate(header)
        if user is not None:
            return reviews.TokenResult(with_authenticated(user), agnostic)
        if self.service_accounts is not None:
            try:
                found = await self.service_accounts.review(token, audiences)
            except sa_token.TokenInvalid as e:
                return reviews.TokenResult(None, [], str(e))
            if found is not None:
                return reviews.TokenResult(with_authenticated(found[0]), found[1])
        return reviews.TokenResult(None, [], "invalid bearer token")

    # ------------------------------------------------------------------ bodies
    async def _write(self, request: ApiRequest, info: RequestInfo, user: auth.User, body: Any,
                     dry_run: bool, wants: Wants) -> web.Response:
        res, verb, q = info.resource, info.verb, request.query
        if verb == "create":
            if res.group == "certificates.k8s.io" and res.name == "certificatesigningrequests":
                bootstrap_auth.record_requester(body, user)
            obj = await self.registry.create(res, info.namespace, body, dry_run, owned=True)
            if self.join_tokens is not None and res.name == "secrets" and info.namespace == "kube-system":
                self.join_tokens.kick()  # a new bootstrap token: sign cluster-info for it now
            return json_response(self._single(res, obj, wants, q), 201)
        if verb == "update":
            obj, created = await self.registry.update(res, info.namespace, info.name or "", body, "", dry_run)
            return json_response(self._single(res, obj, wants, q), 201 if created else 200)
        obj, created = await patching.patch(self.registry, request.query, info, body, dry_run)
        return json_response(self._single(res, obj, wants, q), 201 if created else 200)

    async def _read_body(self, request: ApiRequest, info: RequestInfo, verb: str) -> Any:
        length = request.content_length
        if length is not None and length > MAX_BODY:
            raise errors.too_large(MAX_BODY)
        # read(n) answers what has arrived, up to n bytes: a body sent in several pieces needs every one
        chunks: list[bytes] = []
        size = 0
        while chunk := await request.content.read(MAX_BODY + 1 - size):
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_BODY:
                raise errors.too_large(MAX_BODY)
        data = b"".join(chunks)
        ctype = (request.headers.get("Content-Type") or JSON).split(";")[0].strip().lower()
        if not data.strip():
            if verb in ("delete", "deletecollection"):
                return None
            raise errors.bad_request("the body of the request was empty")
        if ctype == "application/vnd.kubernetes.protobuf":
            from nodeagent.apiserver import protobuf

            try:
                return protobuf.decode(data, info.resource)
            except protobuf.Unsupported as e:
                raise errors.unsupported_media(f"{ctype}: {e}") from None
        if verb == "patch":
            info.patch_type = ctype
            # kube's CRD handler takes no strategic merge patch: custom objects have no patch strategies
            accepted = ["application/json-patch+json", "application/merge-patch+json",
                        "application/strategic-merge-patch+json", "application/apply-patch+yaml"]
            if is_custom(info.resource):
                accepted.remove("application/strategic-merge-patch+json")
            if ctype not in accepted:
                raise ApiError(415, "UnsupportedMediaType",
                               "the body of the request was in an unknown format - "
                               f"accepted media types include: {', '.join(accepted)}")
        try:
            if ctype in ("application/yaml", "application/apply-patch+yaml", "text/yaml"):
                return codec.load_yaml(data)
            if "json" in ctype or ctype in ("", "*/*", "text/plain"):
                return codec.loads(data)
        except Exception as e:
            what = "yaml" if "yaml" in ctype else "json"
            raise errors.bad_request(f"couldn't get version/kind; {what} parse error: "
                                     f"{str(e).splitlines()[0]}") \
                from None
        raise errors.unsupported_media(ctype)

    def _delete_options(self, q: Any, body: Any) -> dict[str, Any]:
        opts: dict[str, Any] = dict(body) if isinstance(body, dict) else {}
        if "gracePeriodSeconds" in q:
            try:
                opts["gracePeriodSeconds"] = int(q["gracePeriodSeconds"])
            except ValueError:
                raise errors.bad_request("gracePeriodSeconds must be an integer") from None
        if "propagationPolicy" in q:
            opts["propagationPolicy"] = q["propagationPolicy"]
        if q.get("orphanDependents") in ("true", "false"):
            opts["orphanDependents"] = q["orphanDependents"] == "true"
        pp = opts.get("propagationPolicy")
        if pp not in (None, "Orphan", "Background", "Foreground"):
            raise errors.invalid("DeleteOptions", "", [{"reason": "FieldValueNotSupported",
                                                        "field": "propagationPolicy",
                                                        "message": f'Unsupported value: "{pp}": '
                                                                   'supported values: "Foreground", '
                                                                   '"Background", "Orphan", "nil"'}],
                                 "meta.k8s.io")
        return opts

    # ------------------------------------------------------------------ encodings
    def _single(self, res: Resource, obj: dict[str, Any], wants: Wants, q: Any) -> dict[str, Any]:
        if wants.table:
            return table.table(res.kind, [obj], obj["metadata"].get("resourceVersion", ""),
                               q.get("includeObject", "Metadata"))
        if wants.partial:
            if wants.partial_list:  # kube's asPartialObjectMetadataList, after the verb has run
                raise errors.not_acceptable("you requested PartialObjectMetadataList, but the requested "
                                            f"object is not a list (*{res.version}.{res.kind})")
            return partial_object(obj)
        return obj

    def _selectors(self, res: Resource, q: Any) -> tuple[Any, Any]:
        try:
            labels = parse_label_selector(q.get("labelSelector"))
            fields = parse_field_selector(q.get("fieldSelector"))
        except SelectorError as e:
            raise errors.bad_request(str(e)) from None
        check_field_selector(res, fields)
        return labels, fields

    async def _list(self, request: ApiRequest, info: RequestInfo, wants: Wants,
                    convert: versions.ConvertedVerbs | None = None) -> web.StreamResponse:
        """kube-apiserver 1.32's list: options validated, the objects at the revision the options ask for
        (see `_list_entries`), selectors, then `limit` with a continue token at that revision; with
        `convert`, over the stored version's objects, each converted to the served one."""
        q = request.query
        served = info.resource
        res = convert.storage if convert is not None else served
        opts = list_options.parse(q, watch=False)
        list_options.validate(opts)
        labels, fields = self._selectors(res, q)
        ns = info.namespace
        ns_name = next((f.value for f in fields if f.field == "metadata.namespace" and f.op == "="), None)
        if res.namespaced and not ns and ns_name:
            ns = ns_name
        token_prefix = res.key_prefix(info.namespace)
        entries, rev, start_key = await self._list_entries(res, ns if res.namespaced else None, token_prefix,
                                                           opts)
        # the cacher ignores the limit of a list from "0" (computeListLimit); a continue is etcd's, paged
        limit = 0 if opts.resource_version == "0" and not opts.cont else opts.limit
        selected: list[Entry] = []
        cont = None
        remaining: int | None = None
        filtering = not labels.is_everything or bool(fields)
        if start_key is not None:
            entries = [e for e in entries if self._key(res, e) >= start_key]
        for i, e in enumerate(entries):
            if filtering and not matches(e.obj, labels, fields):
                continue
            selected.append(e)
            if limit and len(selected) >= limit:
                if i < len(entries) - 1:  # more objects follow, matching or not: kube's hasMore
                    cont = list_options.next_page(self._key(res, e), token_prefix, rev)
                    if not filtering:  # PrepareContinueToken counts only for an unfiltered list
                        remaining = len(entries) - i - 1
                break
        meta: dict[str, Any] = {"resourceVersion": str(rev)}
        if cont:
            meta["continue"] = cont
            if remaining is not None:
                meta["remainingItemCount"] = remaining
        if convert is not None:
            items = [convert.out(e.obj) for e in selected]
        elif not wants.table and not wants.partial:
            head = codec.dumps({"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta})
            body = head[:-1] + b',"items":[' + b",".join(e.raw for e in selected) + b"]}"
            return web.Response(body=body, content_type=JSON)
        else:
            items = [e.obj for e in selected]
        if not wants.table and not wants.partial:
            return json_response({"kind": f"{served.kind}List", "apiVersion": served.api_version,
                                  "metadata": meta, "items": items})
        if wants.table:
            return json_response(table.table(served.kind, items, str(rev),
                                             q.get("includeObject", "Metadata"), cont))
        if not wants.partial_list:  # kube's asPartialObjectMetadata refuses a list
            raise errors.not_acceptable("you requested PartialObjectMetadata, but the requested object is a "
                                        f"list (*{served.version}.{served.kind}List)")
        return json_response({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                              "metadata": meta, "items": [partial_object(o) for o in items]})

    @staticmethod
    def _key(res: Resource, e: Entry) -> str:
        m = e.obj["metadata"]
        return res.key(m.get("namespace"), m["name"])

    async def _list_entries(self, res: Resource, ns: str | None, token_prefix: str,
                            opts: list_options.ListOptions) -> tuple[list[Entry], int, str | None]:
        """The objects a list reads, their revision and the key a continue starts from, as the cacher
        (and the etcd3 store it delegates to) decide: a continue at its token's revision (-1: the latest);
        "" the latest (consistent: once the cache has the store's revision); "0" whatever the cache holds;
        N with Exact, or with a limit and no match (the legacy exact list), the state at N; N otherwise
        (NotOlderThan) the cache once it has reached N, waiting up to 3 s, then 504 Too large."""
        rv = opts.resource_version
        if opts.cont:
            start_key, at = list_options.decode_continue(opts.cont, token_prefix)
            if rv not in ("", "0"):
                raise errors.bad_request("specifying resource version is not allowed when using continue")
            if at < 0:
                entries, rev = await self._consistent(res, ns)
                return entries, rev, start_key
            try:
                return await self._entries_at(res, ns, at), at, start_key
            except store_base.Gone:
                raise list_options.expired_continue(start_key, token_prefix) from None
        if rv == "":
            entries, rev = await self._consistent(res, ns)
            return entries, rev, None
        if rv == "0":
            entries, rev = self.cache.list(res.key_prefix(), ns)
            return entries, rev, None
        n = list_options.parse_rv(rv)
        if opts.match == list_options.EXACT or (not opts.match and opts.limit > 0):
            try:
                return await self._entries_at(res, ns, n), n, None
            except store_base.Gone:
                raise errors.gone(list_options.EXPIRED) from None
        try:
            await self.cache.wait_for(n, FRESH_WAIT_S)
        except TimeoutError:
            raise errors.too_large_resource_version(n, self.cache.rev, TOO_LARGE_RETRY_S) from None
        entries, rev = self.cache.list(res.key_prefix(), ns)
        return entries, rev, None

    async def _consistent(self, res: Resource, ns: str | None) -> tuple[list[Entry], int]:
        """The latest objects: from the cache once it has the store's revision, else (3 s) from the store,
        as the cacher's consistent read falls back."""
        try:
            await self.cache.wait_fresh(FRESH_WAIT_S)
        except TimeoutError:
            objs, rev = await self.store.list(res.key_prefix(ns))
            return [Entry(o) for o in objs], rev
        return self.cache.list(res.key_prefix(), ns)

    async def _entries_at(self, res: Resource, ns: str | None, revision: int) -> list[Entry]:
        """The objects at `revision`: the cache's when nothing of theirs changed since, else the store's
        history (Gone where it has none left)."""
        prefix = res.key_prefix(ns)
        if self.cache.unchanged_since(prefix, revision):
            return self.cache.list(res.key_prefix(), ns)[0]
        try:
            objs = await self.store.list_at(prefix, revision)
        except store_base.FutureRevision as e:
            raise errors.ApiError(500, "", str(e)) from None  # etcd's error, passed on as kube does
        return [Entry(o) for o in objs]

    async def _watch(self, request: ApiRequest, info: RequestInfo, wants: Wants,
                     convert: versions.ConvertedVerbs | None = None) -> web.StreamResponse:
        """A watch; with `convert`, over the stored version's objects, each converted to the served one."""
        q = request.query
        res = info.resource
        labels, fields = self._selectors(res, q)
        if info.name:
            fields = (*fields, *parse_field_selector(f"metadata.name={info.name}"))
        timeout: float | None = None
        if q.get("timeoutSeconds"):
            try:
                timeout = float(q["timeoutSeconds"])
            except ValueError:
                raise errors.bad_request("timeoutSeconds must be a number") from None
        opts = list_options.with_defaults(list_options.parse(q, watch=True))
        list_options.validate(opts)
        list_options.parse_rv(opts.resource_version)  # a bad one is refused before the stream starts
        if opts.watch_list:
            wants.no_table()  # its initial events end with a bookmark no Table carries (kube 1.32)
        sink = await open_watch(request)
        loop = asyncio.get_running_loop()
        pending: list[bytes] = []
        flushed = [0.0]  # when this watcher's last write went out

        def flush() -> None:
            """The events the cache handed over since the last write, as one chunk and one write (a TLS
            record and a syscall per event per watcher was most of the fan-out's cost under a burst)."""
            flushed[0] = loop.time()
            if pending:
                data = b"".join(pending)
                pending.clear()
                sink.send_now(data)

        def direct(data: bytes) -> bool:
            """Queue one event for this watcher's next write (the cache calls this for every event)."""
            if not sink.accepts():
                return False
            if not pending:  # the first event after a quiet spell goes out at once, a burst's every 2 ms
                at = flushed[0] + WATCH_COALESCE_S
                if at <= loop.time():
                    loop.call_soon(flush)
                else:
                    loop.call_at(at, flush)
            pending.append(data)
            return True

        events = watch_events(self.cache, convert.storage if convert else res, info.namespace, labels, fields,
                              opts.resource_version, timeout, opts.bookmarks, opts.send_initial,
                              direct=None if wants.table or wants.partial or convert else direct)
        gauge = self.metrics.watchers.labels(res.name)
        gauge.inc()
        include = q.get("includeObject", "Metadata")
        try:
            async for batch in events:
                out = []
                for typ, obj, line in batch:
                    if convert is not None and typ != "ERROR":
                        obj, line = convert.out_event(typ, obj), None
                    if wants.table and typ not in ("ERROR", "BOOKMARK"):
                        obj = table.table(res.kind, [obj],
                                          obj["metadata"].get("resourceVersion", ""), include)
                    elif wants.partial and typ != "ERROR":  # a bookmark too, as kube's watch encoder
                        obj = partial_object(obj)
                    elif line is not None:
                        out.append(line)
                        continue
                    out.append(codec.dumps({"type": typ, "object": obj}) + b"\n")
                flush()  # what the cache queued for us goes first: a bookmark never overtakes an event
                await sink.send(b"".join(out))
        except (ConnectionResetError, ConnectionError):
            pass
        finally:
            gauge.dec()
            await events.aclose()
        try:
            flush()
            await sink.end()
        except (ConnectionResetError, ConnectionError):
            pass
        return sink.response


__all__ = ["PODS", "Handlers"]
