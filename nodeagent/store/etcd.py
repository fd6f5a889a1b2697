"""The etcd backend: the Store contract on etcd v3 through its gRPC JSON gateway (HTTP + aiohttp).

Keys are `prefix + key` (default `/registry/...`, as the Kubernetes apiserver
lays them out), values the same compact JSON as the SQLite backend, and an
object's resourceVersion is its etcd mod_revision. Writes are single etcd
transactions: create = put if create_revision == 0, update/delete = put/delete
if mod_revision == expected (or the key exists), so preconditions are checked
by etcd itself and several apiservers can share one cluster. etcd's compaction
error ("required revision has been compacted", watch compact_revision) is Gone.

Watches: each EtcdStore runs one etcd watch over its whole prefix (the feed)
and fans its events out in process to every watcher (bounded queues, Gone for
laggards), keeping a ring of recent events for replays, like the apiserver's
watch cache. A watch from a revision older than the ring gets its own etcd watch
stream. Every process has its own feed, so every apiserver sharing the etcd sees
every write, whichever server made it. A broken feed resumes from its last
revision; if that was compacted meanwhile, its watchers end with Gone and relist.

The compacted revision is shared through the key `/compact_rev_key<prefix>`
(outside the prefix), as the Kubernetes apiserver's compactor does.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Sequence

import aiohttp

from nodeagent.store.base import (
    AlreadyExists,
    Conflict,
    Event,
    EventType,
    FutureRevision,
    Gone,
    NotFound,
    StoreError,
)
from nodeagent.store.codec import decode, encode
from nodeagent.store.fanout import DEFAULT_QUEUE, FanOut

log = logging.getLogger(__name__)

GRPC_OUT_OF_RANGE = 11  # etcd's ErrCompacted / ErrFutureRev over the gateway


class EtcdError(StoreError):
    """etcd answered with an error (or no endpoint answered)."""


def _b64(data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode("ascii")


def _unb64(data: str) -> bytes:
    return base64.b64decode(data)


def _objects(resp: dict) -> list[dict]:
    """The objects of a range answer, each at its mod_revision."""
    items = []
    for kv in resp.get("kvs") or ():
        try:
            items.append(decode(_unb64(kv.get("value", "")), int(kv["mod_revision"])))
        except ValueError:  # the compaction mark or a foreign value: not an object
            continue
    return items


def key_range(prefix: bytes) -> dict:
    """The gateway's key/range_end for every key starting with `prefix` (all keys for an empty one)."""
    if not prefix:
        return {"key": _b64(b"\0"), "range_end": _b64(b"\0")}
    return {"key": _b64(prefix), "range_end": _b64(prefix_end(prefix))}


def prefix_end(prefix: bytes) -> bytes:
    """The smallest key greater than every key starting with `prefix` (etcd's GetPrefixRangeEnd)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"  # every key


class EtcdStore:
    """The Store contract on an etcd v3 cluster (3.4+) reached at `endpoints` ("host:port" or URLs)."""

    def __init__(
        self,
        endpoints: Sequence[str] | str,
        prefix: str = "/registry",
        *,
        watch_queue: int = DEFAULT_QUEUE,
        ring_size: int = 4096,
        timeout: float = 10.0,
    ) -> None:
        if isinstance(endpoints, str):
            endpoints = [e for e in endpoints.split(",") if e]
        self.endpoints = [e if "://" in e else f"http://{e}" for e in endpoints]
        if not self.endpoints:
            raise ValueError("no etcd endpoint")
        self.prefix = prefix.rstrip("/")
        self._bprefix = self.prefix.encode()
        self._compact_key = f"/compact_rev_key{self.prefix}"
        self._bcompact_key = _b64(self._compact_key)  # as the gateway spells it in answers
        self._timeout = timeout
        self._current = 0  # index of the endpoint that answered last
        self._session: aiohttp.ClientSession | None = None
        self._fanout = FanOut(watch_queue)
        self._ring: collections.deque[Event] = collections.deque()
        self._ring_size = ring_size
        self._ring_base = 0  # the ring holds every event under the prefix with revision > this
        self._feed_rev = 0  # the last revision the feed has delivered
        self._feed: asyncio.Task | None = None
        self._feed_ready: asyncio.Future | None = None
        self._rev = 0
        self._compacted = 0
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=256, force_close=False),
            json_serialize=json.dumps,
        )
        try:
            resp = await self._call("/v3/kv/range", {"key": _b64(self._compact_key)})
            for kv in resp.get("kvs", ()):
                self._compacted = int(_unb64(kv["value"]))
            self._rev = self._ring_base = self._feed_rev = int(resp["header"]["revision"])
            self._feed_ready = asyncio.get_running_loop().create_future()
            self._feed = asyncio.create_task(self._run_feed(), name=f"etcd-feed{self.prefix}")
            async with asyncio.timeout(self._timeout):
                await asyncio.shield(self._feed_ready)
        except BaseException:
            await self.close()  # nothing left running or open
            raise

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._feed is not None:
            self._feed.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._feed
        self._fanout.close()
        if self._session is not None:
            await self._session.close()

    @property
    def revision(self) -> int:
        return self._rev

    @property
    def compacted(self) -> int:
        return self._compacted

    # -- HTTP --------------------------------------------------------------------------------------

    def _seen(self, rev: int) -> int:
        """Advance `revision`: only with revisions that are object writes (our own acknowledged ones,
        and the feed's events), never with etcd's header revision, which other keys (the compaction
        mark, other prefixes, leases) also advance, so that a reader waiting until its watch has
        reached `revision` (the apiserver's read-your-writes) always gets there."""
        if rev > self._rev:
            self._rev = rev
        return rev

    async def _call(self, path: str, body: dict) -> dict:
        """POST to the gateway, failing over to the next endpoint when one cannot be reached.

        A request is sent again only when it cannot have been applied (no connection), or once
        when the server dropped a pooled keep-alive connection (etcd restarted); the answer then
        carries `"_retried": True` so writers can recognise their own write (see `_txn`).
        """
        if self._session is None or self._closed:
            raise EtcdError(path, "store is closed" if self._closed else "store not started")
        errors = []
        n = len(self.endpoints)
        retried = False
        i = 0
        while i < n:
            idx = (self._current + i) % n
            url = self.endpoints[idx] + path
            try:
                async with self._session.post(
                    url, json=body, timeout=aiohttp.ClientTimeout(total=self._timeout)
                ) as r:
                    data = await r.json(content_type=None)
            except aiohttp.ClientConnectorError as e:
                errors.append(f"{url}: {e}")
                i += 1
                continue
            except aiohttp.ServerDisconnectedError as e:
                if retried:
                    raise EtcdError(path, f"etcd {url}: {e!r}") from e
                retried = True
                continue
            except (aiohttp.ClientError, TimeoutError) as e:
                raise EtcdError(path, f"etcd {url}: {e!r}") from e
            if retried:
                data["_retried"] = True
            self._current = idx
            if r.status != 200 or "error" in data:
                code = data.get("code")
                msg = data.get("message") or data.get("error") or f"HTTP {r.status}"
                if code == 14 and i + 1 < n:  # Unavailable (no leader here): ask another member
                    errors.append(f"{url}: {msg}")
                    i += 1
                    continue
                raise EtcdError(path, f"etcd {path}: {msg} (code {code})")
            return data
        raise EtcdError(path, "no etcd endpoint reachable: " + "; ".join(errors))

    async def _txn(self, key: bytes, compare: dict, success: dict) -> tuple[bool, dict]:
        """One compare-and-swap on `key`; on failure the answer holds the key's current state.

        If the request had to be resent and now fails while the key holds exactly the value being
        put, the first attempt was applied: that is reported as success at the key's mod_revision.
        """
        bkey = _b64(key)
        body = {
            "compare": [{"key": bkey, **compare}],
            "success": [success],
            "failure": [{"request_range": {"key": bkey}}],
        }
        resp = await self._call("/v3/kv/txn", body)
        ok = bool(resp.get("succeeded"))
        put = success.get("request_put")
        if not ok and resp.get("_retried") and put is not None:
            kvs = resp.get("responses", [{}])[0].get("response_range", {}).get("kvs") or []
            if kvs and kvs[0].get("value") == put["value"]:
                resp["header"]["revision"] = kvs[0]["mod_revision"]
                return True, resp
        return ok, resp

    def _full(self, key: str) -> bytes:
        return self._bprefix + key.encode()

    # -- writes ------------------------------------------------------------------------------------

    async def create(self, key: str, obj: dict) -> dict:
        value = encode(obj)
        ok, resp = await self._txn(
            self._full(key),
            {"target": "CREATE", "result": "EQUAL", "create_revision": 0},
            {"request_put": {"key": _b64(self._full(key)), "value": _b64(value)}},
        )
        if not ok:
            raise AlreadyExists(key)
        return decode(value, self._seen(int(resp["header"]["revision"])))

    def _failed(self, key: str, resp: dict, expected: int | None) -> StoreError:
        rng = resp.get("responses", [{}])[0].get("response_range", {})
        kvs = rng.get("kvs") or []
        if not kvs:
            return NotFound(key)
        return Conflict(key, f"{key}: revision is {kvs[0].get('mod_revision')}, not {expected}")

    def _precondition(self, expected: int | None) -> dict:
        if expected is None:
            return {"target": "CREATE", "result": "GREATER", "create_revision": 0}
        return {"target": "MOD", "result": "EQUAL", "mod_revision": expected}

    async def update(self, key: str, obj: dict, expected_revision: int | None = None, *,
                     owned: bool = False) -> dict:
        value = encode(obj)
        full = self._full(key)
        ok, resp = await self._txn(
            full,
            self._precondition(expected_revision),
            {"request_put": {"key": _b64(full), "value": _b64(value)}},
        )
        if not ok:
            raise self._failed(key, resp, expected_revision)
        return decode(value, self._seen(int(resp["header"]["revision"])))

    async def delete(self, key: str, expected_revision: int | None = None) -> dict:
        full = self._full(key)
        ok, resp = await self._txn(
            full,
            self._precondition(expected_revision),
            {"request_delete_range": {"key": _b64(full), "prev_kv": True}},
        )
        if not ok:
            raise self._failed(key, resp, expected_revision)
        prev = resp["responses"][0]["response_delete_range"].get("prev_kvs") or []
        if not prev:  # deleted by someone else between the compare and now cannot happen in a txn
            raise NotFound(key)
        return decode(_unb64(prev[0]["value"]), self._seen(int(resp["header"]["revision"])))

    async def compact(self, revision: int) -> None:
        target = min(revision, self._rev)
        if target <= self._compacted:
            return
        cur = await self._call("/v3/kv/range", {"key": _b64(self._compact_key)})
        kvs = cur.get("kvs") or []
        known_mod = int(kvs[0]["mod_revision"]) if kvs else 0
        if kvs and int(_unb64(kvs[0]["value"])) >= target:
            self._compacted = max(self._compacted, int(_unb64(kvs[0]["value"])))
            return
        try:
            await self._call("/v3/kv/compaction", {"revision": target})
        except EtcdError as e:
            if "compacted" not in str(e):
                raise
            return  # another server compacted past it already
        self._compacted = target
        # Publish the mark, unless another server has moved it since we read it.
        await self._txn(
            self._compact_key.encode(),
            {"target": "MOD", "result": "EQUAL", "mod_revision": known_mod},
            {"request_put": {"key": _b64(self._compact_key), "value": _b64(str(target))}},
        )

    # -- reads -------------------------------------------------------------------------------------

    async def get(self, key: str, *, shared: bool = False) -> dict:
        resp = await self._call("/v3/kv/range", {"key": _b64(self._full(key))})
        kvs = resp.get("kvs") or []
        if not kvs:
            raise NotFound(key)
        return decode(_unb64(kvs[0]["value"]), int(kvs[0]["mod_revision"]))

    async def list_at(self, prefix: str, revision: int) -> list[dict]:
        """etcd's range at a revision: what kube-apiserver reads for an exact list or a continue."""
        body = {**key_range(self._full(prefix)), "revision": revision}
        try:
            resp = await self._call("/v3/kv/range", body)
        except EtcdError as e:
            if "compacted" in str(e):
                raise Gone(prefix, revision, self._compacted) from None
            if "future revision" in str(e):
                raise FutureRevision(prefix, revision, self._rev) from None
            raise
        return _objects(resp)

    async def list(self, prefix: str) -> tuple[list[dict], int]:
        full = self._full(prefix)
        resp = await self._call("/v3/kv/range", key_range(full))
        return _objects(resp), int(resp["header"]["revision"])

    # -- watch -------------------------------------------------------------------------------------

    def _event(self, e: dict) -> Event | None:
        """The contract's event for an etcd one; None for keys that are not objects (the compaction mark)."""
        kv = e["kv"]
        if kv["key"] == self._bcompact_key:
            return None
        key = _unb64(kv["key"])[len(self._bprefix) :].decode()
        rev = int(kv["mod_revision"])
        pkv = e.get("prev_kv") or {}
        prev = decode(_unb64(pkv["value"]), int(pkv["mod_revision"])) if "value" in pkv else None
        if e.get("type") == "DELETE":
            obj = (decode(_unb64(pkv["value"]), rev) if prev is not None
                   else {"metadata": {"resourceVersion": str(rev)}})
            return Event("DELETED", key, obj, rev, prev)
        typ: EventType = "ADDED" if kv.get("create_revision") == kv.get("mod_revision") else "MODIFIED"
        return Event(typ, key, decode(_unb64(kv["value"]), rev), rev, prev if typ == "MODIFIED" else None)

    async def _stream(self, key: bytes, start: int,
                      ready: asyncio.Future | None = None) -> AsyncIterator[dict]:
        """Raw etcd watch responses for the range under `key` from revision `start` (> 0), resuming after
        a broken connection from the last revision seen; Gone when `start` has been compacted."""
        assert self._session is not None
        body = {"create_request": {**key_range(key), "start_revision": start, "prev_kv": True}}
        backoff = 0.05
        while True:
            url = self.endpoints[self._current] + "/v3/watch"
            try:
                async with self._session.post(
                    url, json=body, timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeout)
                ) as r:
                    if r.status != 200:
                        raise EtcdError(url, f"etcd watch: HTTP {r.status}: {await r.text()}")
                    buf = b""
                    async for chunk in r.content.iter_any():
                        buf += chunk
                        while (nl := buf.find(b"\n")) >= 0:
                            line, buf = buf[:nl], buf[nl + 1 :]
                            if not line.strip():
                                continue
                            msg = json.loads(line)
                            if "error" in msg:
                                raise EtcdError(url, f"etcd watch: {msg['error']}")
                            res = msg.get("result", {})
                            if res.get("canceled"):
                                compacted = int(res.get("compact_revision", 0))
                                if compacted:
                                    self._compacted = max(self._compacted, compacted)
                                    raise Gone(key.decode(), start - 1, compacted)
                                raise EtcdError(url, f"etcd watch canceled: {res.get('cancel_reason', '')}")
                            if res.get("created") and ready is not None and not ready.done():
                                ready.set_result(None)
                            events = res.get("events")
                            if events:
                                start = int(events[-1]["kv"]["mod_revision"]) + 1
                                body["create_request"]["start_revision"] = start
                            backoff = 0.05
                            yield res
                    raise aiohttp.ClientPayloadError("watch stream ended")
            except (aiohttp.ClientError, TimeoutError, EtcdError) as e:
                if self._closed:
                    return
                log.warning("etcd watch %s from %d: %s; reconnecting", key, start, e)
                self._current = (self._current + 1) % len(self.endpoints)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    async def _run_feed(self) -> None:
        """The one watch over the whole prefix that feeds the ring and the fan-out."""
        assert self._feed_ready is not None
        while not self._closed:
            try:
                async for res in self._stream(self._bprefix, self._feed_rev + 1, self._feed_ready):
                    for raw in res.get("events") or ():
                        try:
                            ev = self._event(raw)
                        except ValueError as e:  # a foreign value under our prefix: not ours to serve
                            log.warning("etcd feed: skipping undecodable key %r: %s",
                                        raw.get("kv", {}).get("key"), e)
                            continue
                        if ev is None:
                            continue
                        self._ring.append(ev)
                        if len(self._ring) > self._ring_size:
                            self._ring_base = self._ring.popleft().revision
                        self._feed_rev = ev.revision
                        self._seen(ev.revision)
                        self._fanout.publish(ev)
            except Gone as e:
                # Events were compacted away while the feed was down: nobody can be resumed.
                log.warning("etcd feed %s: %s; every watcher must relist", self.prefix, e)
                self._fanout.close(Gone(self.prefix, self._feed_rev, e.compacted))
                self._ring.clear()
                self._ring_base = self._feed_rev = max(self._feed_rev, e.compacted)
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug or a malformed answer: keep feeding rather than go silent
                log.exception("etcd feed %s failed; restarting from %d", self.prefix, self._feed_rev)
                await asyncio.sleep(0.5)

    async def watch(self, prefix: str, since: int) -> AsyncIterator[Event]:
        if self._closed:
            raise StoreError(prefix, "store is closed")
        if since == 0:
            since = self._rev
        if since < self._compacted:
            raise Gone(prefix, since, self._compacted)
        if since < self._ring_base:  # older than our feed's memory: a stream of its own
            async for res in self._stream(self._full(prefix), since + 1):
                for raw in res.get("events") or ():
                    ev = self._event(raw)
                    if ev is not None:
                        yield ev
            return
        # The ring holds every event in (ring_base, feed_rev]; live events come after feed_rev.
        w = self._fanout.subscribe(prefix, max(since, self._feed_rev))
        try:
            backlog = [ev for ev in self._ring if ev.revision > since and ev.key.startswith(prefix)]
            for ev in backlog:
                yield ev
            while (ev := await w.next()) is not None:
                yield ev
        finally:
            self._fanout.unsubscribe(w)
