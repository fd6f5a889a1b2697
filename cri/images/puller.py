"""PullImage over the OCI distribution API: endpoints in order (mirrors, then the registry), the manifest
(an index is resolved by this host's platform), then the config and the layers, every byte verified
against its digest before it is stored, each layer unpacked once and shared."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import ssl
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import aiohttp

from cri.images import manifest as mf
from cri.images.auth import authorize
from cri.images.blobs import sha256_digest
from cri.images.errors import (
    AuthError,
    DigestMismatch,
    ImageError,
    ManifestUnknown,
    PullError,
)
from cri.images.progress import (
    DONE,
    DOWNLOAD,
    EXISTS,
    LAYER_DONE,
    RESOLVED,
    UNPACK,
    Progress,
    ProgressEvent,
    emit,
)
from cri.images.reference import Reference, parse
from cri.images.registries import AuthConfig, Endpoint, TLSConfig
from cri.images.store import Image, ImageStore

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_MANIFEST = 4 << 20
CHUNK = 1 << 16
LAYER_CONCURRENCY = 3
BLOB_ATTEMPTS = 3
RETRY_BACKOFF = 0.5  # seconds, times the attempt number
TIMEOUT = aiohttp.ClientTimeout(total=None, connect=20, sock_connect=20, sock_read=120)
USER_AGENT = "nodeagent-cri/0.1"


class _AsyncKeyedLocks:
    """asyncio locks per key (blob digest), dropped when unused so they never outlive their loop."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, n = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, n + 1)
        try:
            async with lock:
                yield
        finally:
            lock, n = self._locks[key]
            if n <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, n - 1)


_blob_locks: dict[int, _AsyncKeyedLocks] = {}


def _locks_for_loop() -> _AsyncKeyedLocks:
    loop = asyncio.get_running_loop()
    key = id(loop)
    if key not in _blob_locks:
        _blob_locks.clear() if len(_blob_locks) > 16 else None
        _blob_locks[key] = _AsyncKeyedLocks()
    return _blob_locks[key]


def ssl_context(ep: Endpoint) -> ssl.SSLContext | None:
    """The TLS context for an endpoint; contexts are cached per TLS config (loading the system CA bundle
    costs ~100 ms, too much to pay on every pull)."""
    return None if ep.plain_http else _ssl_context(ep.tls)


@functools.lru_cache(maxsize=32)
def _ssl_context(tls: TLSConfig | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if tls:
        if tls.ca_file:
            ctx.load_verify_locations(cafile=tls.ca_file)
        if tls.cert_file:
            ctx.load_cert_chain(tls.cert_file, tls.key_file or None)
        if tls.insecure_skip_verify:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
    return ctx


class RegistrySession:
    """Requests to one endpoint, answering auth challenges once and reusing the token."""

    def __init__(self, http: aiohttp.ClientSession, ep: Endpoint) -> None:
        self.http, self.ep = http, ep
        self.ssl = ssl_context(ep)
        self.authz: str | None = None

    def url(self, path: str) -> str:
        return f"{self.ep.url}/v2/{self.ep.repository}/{path}"

    @contextlib.asynccontextmanager
    async def get(self, path: str, accept: str = "") -> AsyncIterator[aiohttp.ClientResponse]:
        url = self.url(path)
        for attempt in range(2):
            headers = {"User-Agent": USER_AGENT}
            if accept:
                headers["Accept"] = accept
            if self.authz:
                headers["Authorization"] = self.authz
            resp = await self.http.get(url, headers=headers, ssl=self.ssl if self.ssl else True)
            if resp.status == 401 and attempt == 0:
                challenge = resp.headers.get("WWW-Authenticate", "")
                refused = await _refusal(resp)
                try:
                    self.authz = await authorize(self.http, challenge, self.ep.auth, self.ep.repository,
                                                 ssl=self.ssl if self.ssl else True)
                except AuthError as e:
                    raise AuthError(f"{url}: {refused} ({e})") from None
                continue
            try:
                if resp.status in (401, 403):
                    raise AuthError(f"{url}: {await _refusal(resp)} (access denied)")
                yield resp
            finally:
                resp.release()
            return


async def _refusal(resp: aiohttp.ClientResponse) -> str:
    """`401 Unauthorized: UNAUTHORIZED: authentication required`: the status and the registry's own
    reason (the distribution spec's `errors` body), for the message the kubelet shows in ErrImagePull."""
    head = f"{resp.status} {resp.reason or ''}".strip()
    try:
        body = json.loads(await resp.content.read(16 << 10))
        errs = body.get("errors") if isinstance(body, dict) else None
        reasons = [f"{e.get('code', '')}: {e.get('message', '')}".strip(": ") for e in errs or []
                   if isinstance(e, dict)]
    except (ValueError, aiohttp.ClientError, TimeoutError):
        reasons = []
    finally:
        resp.release()
    return f"{head}: {'; '.join(reasons)}" if reasons else head


async def _read_limited(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    data = bytearray()
    async for chunk in resp.content.iter_chunked(CHUNK):
        data += chunk
        if len(data) > limit:
            raise PullError(f"{resp.url}: document larger than {limit} bytes")
    return bytes(data)


async def fetch_manifest(sess: RegistrySession, obj: str, expected: str | None) -> tuple[bytes, str, str]:
    """(body, media type, digest) of the manifest or index named by tag or digest `obj`."""
    async with sess.get(f"manifests/{obj}", accept=mf.ACCEPT) as resp:
        if resp.status == 404:
            raise ManifestUnknown(f"{sess.url('manifests/' + obj)}: manifest unknown")
        if resp.status != 200:
            raise PullError(f"{sess.url('manifests/' + obj)}: HTTP {resp.status}")
        body = await _read_limited(resp, MAX_MANIFEST)
        content_type = resp.headers.get("Content-Type", "")
        header_digest = resp.headers.get("Docker-Content-Digest", "")
    digest = sha256_digest(body)
    if expected and digest != expected:
        raise DigestMismatch(f"manifest {obj} hashes to {digest}, expected {expected}")
    if header_digest.startswith("sha256:") and header_digest != digest:
        raise DigestMismatch(f"manifest {obj} hashes to {digest}, the registry says {header_digest}")
    return body, mf.media_type_of(body, content_type), digest


class _Transient(PullError):
    """A download broke off or the registry had a hiccup (5xx): worth another attempt."""


async def fetch_blob(store: ImageStore, sess: RegistrySession, desc: mf.Descriptor, ref: str,
                     progress: Progress | None, attempts: int = BLOB_ATTEMPTS) -> None:
    """Download a blob into the store, verified; concurrent callers for one digest wait for the first.
    A connection that breaks off mid-blob (or a 5xx) is retried a few times with a short backoff."""
    async with _locks_for_loop().hold(desc.digest):
        for attempt in range(1, attempts + 1):
            if store.blobs.has(desc.digest):
                return
            try:
                await _download(store, sess, desc, ref, progress)
                return
            except (_Transient, aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError,
                    aiohttp.ClientConnectionError, TimeoutError) as e:
                if attempt == attempts:
                    raise PullError(f"blob {desc.digest}: {e} (after {attempts} attempts)") from None
                log.info("blob %s: %s; retrying (%d/%d)", desc.digest, e, attempt, attempts)
                await asyncio.sleep(RETRY_BACKOFF * attempt)


async def _download(store: ImageStore, sess: RegistrySession, desc: mf.Descriptor, ref: str,
                    progress: Progress | None) -> None:
    async with sess.get(f"blobs/{desc.digest}") as resp:
        if resp.status == 404:
            raise PullError(f"{sess.url('blobs/' + desc.digest)}: blob unknown")
        if resp.status >= 500 or resp.status == 429:
            raise _Transient(f"{sess.url('blobs/' + desc.digest)}: HTTP {resp.status}")
        if resp.status != 200:
            raise PullError(f"{sess.url('blobs/' + desc.digest)}: HTTP {resp.status}")
        writer = store.blobs.writer(desc.digest, desc.size)
        try:
            async for chunk in resp.content.iter_chunked(CHUNK):
                writer.write(chunk)  # page-cache writes of 64 KiB: short enough for the loop
                if desc.size > 0 and writer.size > desc.size:
                    raise DigestMismatch(f"blob {desc.digest} is longer than its {desc.size} bytes")
                emit(progress, ProgressEvent(DOWNLOAD, ref, desc.digest, writer.size, desc.size))
            # a complete response of the wrong length is wrong content (commit says so), not a broken transfer
            await _in_thread_to_completion(writer.commit)
        except BaseException:
            writer.abort()
            raise


async def _pull_from(store: ImageStore, http: aiohttp.ClientSession, ep: Endpoint, ref: Reference,
                     progress: Progress | None) -> Image:
    sess = RegistrySession(http, ep)
    shown = str(ref)
    body, media_type, top_digest = await fetch_manifest(sess, ref.object, ref.digest)
    index_blobs: dict[str, bytes] = {}
    digest = top_digest
    for _ in range(3):  # an index may point at another index
        if not mf.is_index(media_type):
            break
        index_blobs[digest] = body
        chosen = mf.select_manifest(mf.parse_index(body))
        body, media_type, digest = await fetch_manifest(sess, chosen.digest, chosen.digest)
    manifest = mf.parse_manifest(body, media_type)
    diff_ids: list[str] = []
    pins = [top_digest, digest, manifest.config.digest, *(ld.digest for ld in manifest.layers)]
    with store.pinned(pins):
        await fetch_blob(store, sess, manifest.config, shown, None)
        config = _json_config(await asyncio.to_thread(store.blobs.read, manifest.config.digest))
        diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
        if len(diff_ids) != len(manifest.layers):
            raise PullError(f"manifest has {len(manifest.layers)} layers but the config "
                            f"{len(diff_ids)} diff_ids")
        with store.pinned(diff_ids):
            total = sum(max(ld.size, 0) for ld in manifest.layers)
            emit(progress, ProgressEvent(RESOLVED, shown, digest, 0, total))
            sem = asyncio.Semaphore(LAYER_CONCURRENCY)

            async def layer(desc: mf.Descriptor, diff_id: str) -> None:
                async with sem:
                    if store.has_layer(diff_id):
                        emit(progress, ProgressEvent(EXISTS, shown, desc.digest, desc.size, desc.size))
                        return
                    await fetch_blob(store, sess, desc, shown, progress)
                    path = store.blobs.path(desc.digest)

                    def on_bytes(n: int) -> None:
                        emit(progress, ProgressEvent(UNPACK, shown, desc.digest, n, desc.size))

                    await _in_thread_to_completion(store.ensure_layer, diff_id, lambda: open(path, "rb"),
                                                   None, on_bytes)
                    emit(progress, ProgressEvent(LAYER_DONE, shown, desc.digest, desc.size, desc.size))

            try:
                async with asyncio.TaskGroup() as tg:
                    for desc, diff_id in zip(manifest.layers, diff_ids, strict=True):
                        tg.create_task(layer(desc, diff_id))
            except ExceptionGroup as eg:
                raise _first(eg) from None
            size = manifest.config.size + sum(max(ld.size, 0) for ld in manifest.layers)
            tagged = None if ref.digest else ref.tagged
            tags = [tagged] if tagged else []

            def finish() -> Image:  # fsyncs and the store's file lock: off the event loop
                for d, b in index_blobs.items():
                    store.blobs.put(b, d)
                store.blobs.put(body, digest)
                blobs = [*index_blobs, digest, *(ld.digest for ld in manifest.layers)]
                return store.record(manifest.config.digest, size, diff_ids, blobs, digest, tags,
                                    [f"{ref.name}@{top_digest}"])

            image = await _in_thread_to_completion(finish)
    emit(progress, ProgressEvent(DONE, shown, image.id, size, size))
    return image


async def _in_thread_to_completion(fn: Callable[..., T], *args: object) -> T:
    """Run fn in a thread; if we are cancelled, wait for the thread to finish (it cannot be stopped) so
    a failed pull returns only after every unpack it started has completed or cleaned up."""
    fut = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            await fut
        raise


def _first(eg: BaseExceptionGroup) -> BaseException:
    """The first real error of a TaskGroup failure (layer errors are reported one at a time)."""
    e: BaseException = eg
    while isinstance(e, BaseExceptionGroup):
        e = e.exceptions[0]
    return e


def _json_config(data: bytes) -> dict:
    import json

    try:
        cfg = json.loads(data)
    except ValueError:
        raise PullError("image config is not JSON") from None
    if not isinstance(cfg, dict):
        raise PullError("image config is not a JSON object")
    return cfg


async def pull_image(store: ImageStore, ref: str, auth: dict | None = None,
                     progress: Progress | None = None) -> Image:
    parsed = parse(ref)
    if parsed.digest:  # content named by digest cannot change: use what is here if it is complete
        have = store.resolve(parsed.digested or "")
        if have is not None and all(p.is_dir() for p in have.layers):
            emit(progress, ProgressEvent(DONE, str(parsed), have.id, have.size, have.size))
            return have
    request_auth = AuthConfig.from_dict(auth)
    endpoints = store.registries.endpoints(parsed, request_auth)
    errors: list[tuple[Endpoint, Exception]] = []
    async with aiohttp.ClientSession(timeout=TIMEOUT, trust_env=False) as http:
        for ep in endpoints:
            try:
                return await _pull_from(store, http, ep, parsed, progress)
            except (TimeoutError, ImageError, aiohttp.ClientError, OSError, ValueError) as e:
                log.info("pull %s from %s failed: %s", parsed, ep.url, e)
                errors.append((ep, e))
    raise _summarise(str(parsed), errors)


def _summarise(ref: str, errors: list[tuple[Endpoint, Exception]]) -> PullError:
    detail = "; ".join(f"{ep.url}: {type(e).__name__}: {e}" for ep, e in errors)
    answered: list[type[Exception]] = [type(e) for _, e in errors if isinstance(e, ImageError)]
    kinds = answered or [type(e) for _, e in errors]  # an endpoint that answered beats unreachable ones
    for cls in (DigestMismatch, AuthError):
        if any(issubclass(k, cls) for k in kinds):
            return cls(f"pull {ref} failed: {detail}")
    if kinds and all(issubclass(k, ManifestUnknown) for k in kinds):
        return ManifestUnknown(f"image {ref} not found: {detail}")
    return PullError(f"pull {ref} failed: {detail}")
