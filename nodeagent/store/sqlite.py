"""The default backend: a revision log in one SQLite file (WAL), written by one thread with group commit.

Layout: `log` holds every write (revision, key, type, value JSON, prev revision)
until compaction; `kv` holds the current state (key, revision, value); `meta`
holds the compacted revision. A write appends to `log` and changes `kv` in the
same transaction, so the two always agree, and the current revision after a
restart is max(log.revision, compacted, 1).

Writes: callers on the event loop encode their object and hand an op to the
writer thread (sqlite3 blocks, so never on the loop). The thread drains every op
queued while the previous transaction was committing and runs them as one
transaction (group commit): one fsync for many writes, yet each caller is
acknowledged only after the transaction holding its write has committed.
Preconditions (absent for create, revision for update/delete) are checked by
that thread inside the transaction, so two updates based on the same revision
cannot both win, even in the same batch.

Durability: `synchronous=FULL` by default. In WAL mode NORMAL also survives
kill -9 (a commit is in the OS page cache once write() returns; only power loss
or a kernel crash can lose it; tests/unit/store/test_durability.py kills writers
in both modes), FULL fsyncs the WAL at every commit and also survives power loss.
Measured with bench/store.py on the shared 2-core machine (load ~14, its disk
busy with other builds): one writer at a time, which pays a commit per write,
180 creates/s FULL vs 1,550 NORMAL (fsync ~5 ms under that load, 0.25 ms when
quiet); 64 concurrent writers, where group commit pays one fsync per batch,
2,950 vs 4,360 creates/s, both well above what the apiserver needs (1,000/s).
So FULL costs little where throughput matters, and an acknowledged write then
survives anything short of disk failure, as with etcd (which fsyncs every
commit): FULL is the default; NORMAL is an option (`--datastore
'sqlite?synchronous=NORMAL'`) for a node where commit latency matters more than
surviving a power cut.

Reads and watches: after each commit the event loop applies the batch to an
in-memory copy of the current state (keys sorted, values kept as JSON text) and
to a ring of recent events, then publishes the events to the in-process fan-out
(nodeagent.store.fanout) and resolves the callers' futures. Gets and lists are
served from that copy, as the apiserver's watch cache does, so they never touch
the disk or block the loop. A watch replays its backlog from the ring, or from
the `log` table (in a thread) when it starts further back, then follows live
events from its own bounded queue.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import fcntl
import itertools
import logging
import os
import queue
import sqlite3
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Literal

from nodeagent.store.base import (
    AlreadyExists,
    Conflict,
    Event,
    EventType,
    FutureRevision,
    Gone,
    NotFound,
    StoreError,
    rewind,
)
from nodeagent.store.codec import decode, encode
from nodeagent.store.fanout import DEFAULT_QUEUE, FanOut

log = logging.getLogger(__name__)

ADDED, MODIFIED, DELETED = 0, 1, 2
TYPE_NAMES: tuple[EventType, EventType, EventType] = ("ADDED", "MODIFIED", "DELETED")
_CREATE, _UPDATE, _DELETE, _COMPACT = range(4)

SCHEMA = """
CREATE TABLE IF NOT EXISTS log (
    revision INTEGER PRIMARY KEY,
    key TEXT NOT NULL,
    type INTEGER NOT NULL,          -- 0 ADDED, 1 MODIFIED, 2 DELETED
    value TEXT NOT NULL,            -- the object (for DELETED: as it was before the delete)
    prev_revision INTEGER,          -- the key's previous revision (NULL for ADDED)
    prev_value TEXT                 -- a MODIFIED entry's previous value, when its entry is compacted away
);
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY,
    revision INTEGER NOT NULL,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""

# A raw log entry as kept in the ring and read from the table:
# (revision, type, key, value, prev_revision, prev_value)
_Raw = tuple[int, int, str, str, int | None, str | None]
# What the writer hands back for one op: the log entry it wrote, ("COMPACT", the compacted revision), or
# the error its caller gets.
_Result = _Raw | tuple[Literal["COMPACT"], int] | StoreError


class _Op:
    __slots__ = ("data", "expected", "future", "key", "kind")

    def __init__(self, kind: int, key: str, data: str, expected: int | None,
                 future: asyncio.Future[dict | None]):
        self.kind = kind
        self.key = key
        self.data = data  # the encoded object to write; empty for a delete or a compaction
        self.expected = expected
        self.future = future


def _connect(path: str, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    return conn


class SQLiteStore:
    """The Store contract on one SQLite file; one process owns the file (it caches the current state)."""

    def __init__(
        self,
        path: str,
        *,
        synchronous: str = "FULL",
        watch_queue: int = DEFAULT_QUEUE,
        ring_size: int = 4096,
        max_batch: int = 512,  # bounds how long one batch's hand-over holds the event loop
    ) -> None:
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError(f"synchronous must be FULL, NORMAL or EXTRA, not {synchronous!r}")
        self.path = path
        self.synchronous = synchronous.upper()
        self._max_batch = max_batch
        self._fanout = FanOut(watch_queue)
        self._ring: collections.deque[_Raw] = collections.deque(maxlen=ring_size)
        self._cache: dict[str, tuple[int, str]] = {}
        self._keys: list[str] = []
        self._rev = 0
        self._compacted = 0
        self._ops: queue.SimpleQueue[_Op | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reader: sqlite3.Connection | None = None
        self._reader_lock = threading.Lock()
        self._closed = False
        self._lock_fd: int | None = None
        self._broken: StoreError | None = None
        # Writer-thread state: the revision and compaction it has committed.
        self._wrev = 0
        self._wcompacted = 0

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        conn, rows = await asyncio.to_thread(self._open)
        for key, rev, value in rows:  # ordered by key
            self._cache[key] = (rev, value)
            self._keys.append(key)
        self._rev, self._compacted = self._wrev, self._wcompacted
        self._thread = threading.Thread(target=self._writer, args=(conn,), name="sqlite-store", daemon=True)
        self._thread.start()

    def _open(self) -> tuple[sqlite3.Connection, list[tuple[str, int, str]]]:
        parent = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(parent, mode=0o700, exist_ok=True)
        # One owner per file: this process caches the current state, so a second writer (another
        # server started on the same data dir) would make it lie. The lock dies with the process.
        lock_fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise StoreError(self.path, f"{self.path} is in use by another process") from None
        self._lock_fd = lock_fd
        # Secrets live here: the file (and SQLite's -wal/-shm, which copy its mode) is private.
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
        conn = _connect(self.path, self.synchronous)
        conn.executescript(SCHEMA)
        if "prev_value" not in {r[1] for r in conn.execute("PRAGMA table_info(log)")}:  # an older file
            conn.execute("ALTER TABLE log ADD COLUMN prev_value TEXT")
        row = conn.execute("SELECT value FROM meta WHERE name = 'compacted'").fetchone()
        compacted = row[0] if row else 0
        (last,) = conn.execute("SELECT MAX(revision) FROM log").fetchone()
        self._wcompacted = compacted
        self._wrev = max(last or 0, compacted, 1)  # as in etcd: an empty store is at revision 1
        rows = conn.execute("SELECT key, revision, value FROM kv ORDER BY key").fetchall()
        self._reader = _connect(self.path, self.synchronous)
        return conn, rows

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._ops.put(None)  # after every op already queued
            await asyncio.to_thread(self._thread.join)
        self._fanout.close()
        if self._reader is not None:
            with self._reader_lock:
                self._reader.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    @property
    def revision(self) -> int:
        return self._rev

    @property
    def compacted(self) -> int:
        return self._compacted

    # -- writes ------------------------------------------------------------------------------------

    async def _submit(self, kind: int, key: str, data: str, expected: int | None) -> dict | None:
        if self._broken is not None:
            raise self._broken
        if self._closed or self._loop is None:
            raise StoreError(key, "store is closed" if self._closed else "store not started")
        fut: asyncio.Future[dict | None] = self._loop.create_future()
        self._ops.put(_Op(kind, key, data, expected, fut))
        return await fut

    async def _write(self, kind: int, key: str, data: str, expected: int | None) -> dict:
        """A create, update or delete: resolved with the object written (for a delete, as it was)."""
        obj = await self._submit(kind, key, data, expected)
        assert obj is not None  # only a compaction resolves to None
        return obj

    async def create(self, key: str, obj: dict) -> dict:
        return await self._write(_CREATE, key, encode(obj), None)

    async def update(self, key: str, obj: dict, expected_revision: int | None = None, *,
                     owned: bool = False) -> dict:
        return await self._write(_UPDATE, key, encode(obj), expected_revision)

    async def delete(self, key: str, expected_revision: int | None = None) -> dict:
        return await self._write(_DELETE, key, "", expected_revision)

    async def compact(self, revision: int) -> None:
        await self._submit(_COMPACT, "", "", revision)

    def _writer(self, conn: sqlite3.Connection) -> None:
        """The writer thread: drain queued ops, commit them as one transaction, hand results to the loop."""
        ops = self._ops
        stop = False
        batch: list[_Op] = []
        try:
            while not stop:
                op = ops.get()
                if op is None:
                    break
                batch = [op]
                while len(batch) < self._max_batch:
                    try:
                        op = ops.get_nowait()
                    except queue.Empty:
                        break
                    if op is None:
                        stop = True
                        break
                    batch.append(op)
                results = self._commit(conn, batch)
                assert self._loop is not None
                try:
                    self._loop.call_soon_threadsafe(self._apply, results)
                except RuntimeError:  # the loop is gone: nobody is waiting any more
                    return
        except BaseException as e:  # a bug: fail every waiting caller rather than hang them forever
            log.exception("sqlite store: writer thread died")
            broken = self._broken = StoreError(self.path, f"sqlite store writer died: {e!r}")
            failed: list[tuple[_Op, _Result]] = [(op, broken) for op in batch]
            while True:
                try:
                    op = ops.get_nowait()
                except queue.Empty:
                    break
                if op is not None:
                    failed.append((op, broken))
            if self._loop is not None:
                with contextlib.suppress(RuntimeError):
                    self._loop.call_soon_threadsafe(self._apply, failed)
        finally:
            conn.close()

    def _commit(self, conn: sqlite3.Connection, batch: list[_Op]) -> list[tuple[_Op, _Result]]:
        rev = self._wrev
        compacted = self._wcompacted
        out: list[tuple[_Op, _Result]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for op in batch:
                if op.kind == _COMPACT:
                    target = min(op.expected or 0, rev)
                    if target > compacted:
                        # a change kept whose previous entry goes takes that value along (etcd keeps the
                        # latest version of each key at the compaction): history above it stays whole
                        conn.execute("UPDATE log SET prev_value = (SELECT p.value FROM log p WHERE "
                                     "p.revision = log.prev_revision) WHERE revision > ? AND type = ? "
                                     "AND prev_revision <= ? AND prev_value IS NULL",
                                     (target, MODIFIED, target))
                        conn.execute("DELETE FROM log WHERE revision <= ?", (target,))
                        conn.execute("INSERT OR REPLACE INTO meta VALUES ('compacted', ?)", (target,))
                        compacted = target
                    out.append((op, ("COMPACT", compacted)))
                    continue
                key = op.key
                row = conn.execute("SELECT revision, value FROM kv WHERE key = ?", (key,)).fetchone()
                if op.kind == _CREATE:
                    if row is not None:
                        out.append((op, AlreadyExists(key)))
                        continue
                    rev += 1
                    conn.execute("INSERT INTO log VALUES (?, ?, ?, ?, NULL, NULL)",
                                 (rev, key, ADDED, op.data))
                    conn.execute("INSERT INTO kv VALUES (?, ?, ?)", (key, rev, op.data))
                    out.append((op, (rev, ADDED, key, op.data, None, None)))
                    continue
                if row is None:
                    out.append((op, NotFound(key)))
                    continue
                prev_rev, prev_value = row
                if op.expected is not None and op.expected != prev_rev:
                    out.append((op, Conflict(key, f"{key}: revision is {prev_rev}, not {op.expected}")))
                    continue
                rev += 1
                if op.kind == _UPDATE:
                    # the previous value rides along when its own entry is no longer in the log, so the
                    # state at any revision since the compaction can be read back (list_at)
                    conn.execute("INSERT INTO log VALUES (?, ?, ?, ?, ?, ?)",
                                 (rev, key, MODIFIED, op.data, prev_rev,
                                  prev_value if prev_rev <= compacted else None))
                    conn.execute("UPDATE kv SET revision = ?, value = ? WHERE key = ?", (rev, op.data, key))
                    out.append((op, (rev, MODIFIED, key, op.data, prev_rev, prev_value)))
                else:
                    conn.execute("INSERT INTO log VALUES (?, ?, ?, ?, ?, NULL)",
                                 (rev, key, DELETED, prev_value, prev_rev))
                    conn.execute("DELETE FROM kv WHERE key = ?", (key,))
                    out.append((op, (rev, DELETED, key, prev_value, prev_rev, prev_value)))
            conn.execute("COMMIT")
        except Exception as e:  # nothing of the batch is committed: every caller gets the error
            log.error("sqlite store: commit of %d ops failed: %s", len(batch), e)
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            err = StoreError("", f"sqlite commit failed: {e}")
            return [(op, err) for op in batch]
        self._wrev = rev
        self._wcompacted = compacted
        return out

    def _apply(self, results: list[tuple[_Op, _Result]]) -> None:
        """On the loop, in commit order: update the cached state, publish events, acknowledge callers."""
        cache, keys, fanout, ring = self._cache, self._keys, self._fanout, self._ring
        for op, res in results:
            fut = op.future
            if isinstance(res, BaseException):
                if not fut.done():
                    fut.set_exception(res)
                continue
            if res[0] == "COMPACT":
                self._compacted = res[1]
                while ring and ring[0][0] <= self._compacted:
                    ring.popleft()
                if not fut.done():
                    fut.set_result(None)
                continue
            raw = res
            rev, typ, key, value = raw[0], raw[1], raw[2], raw[3]
            if typ == ADDED:
                cache[key] = (rev, value)
                bisect.insort(keys, key)
            elif typ == MODIFIED:
                cache[key] = (rev, value)
            else:
                del cache[key]
                del keys[bisect.bisect_left(keys, key)]
            self._rev = rev
            ring.append(raw)
            if fanout:
                fanout.publish(_event(raw))
            if not fut.done():
                fut.set_result(decode(value, rev))

    # -- reads -------------------------------------------------------------------------------------

    async def get(self, key: str, *, shared: bool = False) -> dict:
        try:
            rev, value = self._cache[key]
        except KeyError:
            raise NotFound(key) from None
        return decode(value, rev)

    async def list_at(self, prefix: str, revision: int) -> list[dict]:
        """From the current state and the log after `revision`: a key's first entry after it holds (or
        joins, or carries once compacted) its value then; any revision since the compaction is served."""
        if revision > self._rev:
            raise FutureRevision(prefix, revision, self._rev)
        if revision < self._compacted:
            raise Gone(prefix, revision, self._compacted)
        upto = self._rev
        keys, cache = self._keys, self._cache
        i = bisect.bisect_left(keys, prefix)
        current: dict[str, tuple[int, str]] = {}
        while i < len(keys) and keys[i].startswith(prefix):
            current[keys[i]] = cache[keys[i]]
            i += 1
        raws: Sequence[_Raw] = ()
        if revision < upto:
            ring = self._from_ring(revision)
            raws = ring if ring is not None else await asyncio.to_thread(self._read_log, prefix, revision,
                                                                         upto)
        changes: list[tuple[str, str, tuple[int, str] | None]] = [
            (TYPE_NAMES[r[1]], r[2], (r[4], r[5]) if r[4] is not None and r[5] is not None else None)
            for r in raws if r[0] <= upto and r[2].startswith(prefix)]
        # decode only what is returned: the state at `revision` as (revision, JSON) per key
        return [decode(v, rv) for rv, v in rewind(prefix, revision, current, changes)]

    async def list(self, prefix: str) -> tuple[list[dict], int]:
        keys, cache = self._keys, self._cache
        i = bisect.bisect_left(keys, prefix)
        out = []
        while i < len(keys) and keys[i].startswith(prefix):
            rev, value = cache[keys[i]]
            out.append(decode(value, rev))
            i += 1
        return out, self._rev

    # -- watch -------------------------------------------------------------------------------------

    async def watch(self, prefix: str, since: int) -> AsyncIterator[Event]:
        if self._closed:
            raise StoreError(prefix, "store is closed")
        if since == 0:
            since = self._rev
        if since < self._compacted:
            raise Gone(prefix, since, self._compacted)
        upto = self._rev
        # Subscribe and take the ring's part of the backlog with no await in between: every
        # revision is either in the backlog (<= upto) or delivered live (> upto).
        w = self._fanout.subscribe(prefix, max(since, upto))
        try:
            if since < upto:
                backlog = self._from_ring(since)
                if backlog is None:
                    backlog = await asyncio.to_thread(self._read_log, prefix, since, upto)
                for raw in backlog:
                    if raw[2].startswith(prefix):
                        yield _event(raw)
            while (ev := await w.next()) is not None:
                yield ev
        finally:
            self._fanout.unsubscribe(w)

    def _from_ring(self, since: int) -> Sequence[_Raw] | None:
        ring = self._ring
        if not ring or ring[0][0] > since + 1:
            return None
        return list(itertools.islice(ring, since + 1 - ring[0][0], None))

    def _read_log(self, prefix: str, since: int, upto: int) -> Sequence[_Raw]:
        """The log entries in (since, upto] under `prefix`, read in one snapshot with the compaction mark."""
        assert self._reader is not None
        with self._reader_lock:
            conn = self._reader
            conn.execute("BEGIN")
            try:
                row = conn.execute("SELECT value FROM meta WHERE name = 'compacted'").fetchone()
                compacted = row[0] if row else 0
                if since < compacted:
                    raise Gone(prefix, since, compacted)
                rows = conn.execute(
                    "SELECT l.revision, l.type, l.key, l.value, l.prev_revision, "
                    "COALESCE(l.prev_value, p.value) FROM log l "
                    "LEFT JOIN log p ON p.revision = l.prev_revision "
                    "WHERE l.revision > ? AND l.revision <= ? ORDER BY l.revision",
                    (since, upto),
                ).fetchall()
            finally:
                conn.execute("COMMIT")
        return [r for r in rows if r[2].startswith(prefix)]


def _event(raw: _Raw) -> Event:
    rev, typ, key, value, prev_rev, prev_value = raw
    prev = decode(prev_value, prev_rev) if prev_value is not None and prev_rev is not None else None
    return Event(TYPE_NAMES[typ], key, decode(value, rev), rev, prev)


def verify(path: str) -> list[str]:
    """Consistency problems in a store file (empty when sound): log and current state must agree.

    Used after a crash to prove there is no half-written entry: every current key matches its
    latest log entry, no deleted key is still current, and revisions never go backwards.
    """
    problems: list[str] = []
    conn = sqlite3.connect(path)
    try:
        row = conn.execute("SELECT value FROM meta WHERE name = 'compacted'").fetchone()
        compacted = row[0] if row else 0
        latest: dict[str, tuple[int, int, str]] = {}
        for rev, typ, key, value, prev in conn.execute(
            "SELECT revision, type, key, value, prev_revision FROM log ORDER BY revision"
        ):
            if rev <= compacted:
                problems.append(f"log revision {rev} survives compaction at {compacted}")
            last = latest.get(key)
            if typ == ADDED:
                if prev is not None or (last is not None and last[1] != DELETED):
                    problems.append(f"{key}@{rev}: ADDED over a live key")
            elif last is None:
                if prev is None or prev > compacted:
                    problems.append(f"{key}@{rev}: {TYPE_NAMES[typ]} without a previous entry")
            elif prev != last[0] or last[1] == DELETED:
                problems.append(f"{key}@{rev}: prev_revision {prev}, but the previous entry is {last[:2]}")
            latest[key] = (rev, typ, value)
        current = {k: (r, v) for k, r, v in conn.execute("SELECT key, revision, value FROM kv")}
        top = max([compacted, *(e[0] for e in latest.values())])
        for key, (rev, value) in current.items():
            if rev > top:
                problems.append(f"{key}: current revision {rev} beyond the log's {top}")
            last = latest.get(key)
            if last is None:
                if rev > compacted:
                    problems.append(f"{key}@{rev}: current, but not in the log")
            elif last[1] == DELETED or last[0] != rev or last[2] != value:
                problems.append(f"{key}: current state @{rev} differs from the log's last entry @{last[0]}")
        for key, (rev, typ, _) in latest.items():
            if typ != DELETED and key not in current:
                problems.append(f"{key}@{rev}: in the log, missing from the current state")
    finally:
        conn.close()
    return problems
