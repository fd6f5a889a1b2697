"""/openapi/v2 and /openapi/v3 on the wire, as kube-openapi's handlers answer them.

Content negotiation on Accept (JSON, or gnostic protobuf for v2: the `@v1.0` name clients send is answered
with the `.v1.0` content type, which Go's MIME parser can read), a quoted SHA-512 ETag with 304 on
If-None-Match, and for v3 group-version documents the `?hash=` contract: the current hash is cached as
immutable for a year, a stale one is redirected (301) to the current URL.
"""

from __future__ import annotations

import asyncio
import email.utils
import time

from aiohttp import web

from nodeagent.apiserver import errors
from nodeagent.apiserver.incoming import ApiRequest
from nodeagent.apiserver.openapi import Document, OpenAPI

JSON = "application/json"
PB_V2 = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
PB_V2_OLD = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
PB_V3 = "application/com.github.proto-openapi.spec.v3.v1.0+protobuf"
PB_V3_OLD = "application/com.github.proto-openapi.spec.v3@v1.0+protobuf"
_STARTED = email.utils.formatdate(time.time(), usegmt=True)


def accepted(accept: str, offers: dict[str, str]) -> str | None:
    """The offer (a key of `offers`, the media types served) the Accept header prefers; None: none fits."""
    clauses: list[tuple[float, int, str]] = []
    for i, part in enumerate((accept or "*/*").split(",")):
        fields = [f.strip() for f in part.split(";")]
        q = 1.0
        for f in fields[1:]:
            if f.startswith("q="):
                try:
                    q = float(f[2:])
                except ValueError:
                    q = 0.0
        if fields[0] and q > 0:
            clauses.append((-q, i, fields[0].lower()))
    for _, _, media in sorted(clauses):
        for offer in offers:
            if media in (offer, "*/*", "application/*"):
                return offer
    return None


def _respond(request: ApiRequest, doc: Document, content_type: str,
             extra: dict[str, str] | None = None) -> web.Response:
    headers = {"Etag": f'"{doc.etag}"', "Vary": "Accept", "Last-Modified": _STARTED, **(extra or {})}
    if request.headers.get("If-None-Match", "").strip() in (f'"{doc.etag}"', "*"):
        return web.Response(status=304, headers=headers)
    resp = web.Response(body=doc.body, headers={**headers, "Content-Type": content_type})
    if "gzip" in request.headers.get("Accept-Encoding", ""):
        resp.enable_compression()
    return resp


async def serve(openapi: OpenAPI, request: ApiRequest, path: str) -> web.StreamResponse:
    """`path` is /openapi/v2, /openapi/v3 or /openapi/v3/<group-version>, without a trailing slash.

    Documents are built and encoded on a worker thread (a fraction of a second when the served set changed).
    """
    accept = request.headers.get("Accept", "")
    if path == "/openapi/v2":
        offer = accepted(accept, {JSON: JSON, PB_V2_OLD: PB_V2, PB_V2: PB_V2})
        if offer is None:
            return web.Response(status=406, headers={"Vary": "Accept"})
        doc = await asyncio.to_thread(openapi.v2_json if offer == JSON else openapi.v2_proto)
        return _respond(request, doc, JSON if offer == JSON else PB_V2)
    if path == "/openapi/v3":
        return _respond(request, await asyncio.to_thread(openapi.v3_index), JSON)
    gv = path.removeprefix("/openapi/v3/")
    found = await asyncio.to_thread(openapi.v3_document, gv)
    if found is None:
        raise errors.ApiError(404, "NotFound", "the server could not find the requested resource")
    offer = accepted(accept, {JSON: JSON})
    if offer is None:
        # the v3 protobuf form (gnostic openapi.v3.Document) is not produced: JSON is what clients fetch
        return web.Response(status=406, headers={"Vary": "Accept"})
    want = request.query.get("hash")
    extra: dict[str, str] = {}
    if want:
        if want != found.etag:
            return web.Response(status=301, headers={"Location": f"/openapi/v3/{gv}?hash={found.etag}",
                                                     "Vary": "Accept"})
        extra = {"Cache-Control": "public, immutable",
                 "Expires": email.utils.formatdate(time.time() + 365 * 86400, usegmt=True)}
    return _respond(request, found, JSON, extra)
