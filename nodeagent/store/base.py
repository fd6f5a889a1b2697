"""The store contract: a revision log of JSON objects under string keys, with watch.

Modelled on etcd's MVCC semantics as the Kubernetes apiserver uses them:
every write gets the next cluster-wide revision; an object's
`metadata.resourceVersion` is the revision of its last write (set by the
store); `list` returns the revision it was read at; `watch(prefix, since)`
yields every change with a revision greater than `since`, in order, without
gaps or duplicates; revisions at or below the compacted one are `Gone`.
Backends: memory (tests, benchmarks), SQLite (the default), etcd.

Watch details every backend follows (as etcd and the apiserver's watch cache do):
- Revisions start at 1 on an empty store, as in etcd (the first write gets 2), so a
  list's revision is never 0 and `since=0` can mean "from now": only changes after
  the current revision (etcd's start_revision 0). The apiserver's "resourceVersion=0
  / unset" list-then-watch semantics are built on top: list, then watch from the
  list's revision.
- Events are shared between watchers: treat them as read-only.
- A watcher that falls too far behind (its bounded queue is full) is ended with
  Gone, so its client relists instead of the server buffering without bound.
- Closing the store ends every watch cleanly (the iterator just stops).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Literal, Protocol, TypeVar, runtime_checkable

T = TypeVar("T")
EventType = Literal["ADDED", "MODIFIED", "DELETED"]


class StoreError(Exception):
    """Base of the store's typed errors; the apiserver maps each to a Kubernetes Status."""

    def __init__(self, key: str, message: str = "") -> None:
        super().__init__(message or key)
        self.key = key


class NotFound(StoreError):
    pass


class AlreadyExists(StoreError):
    pass


class Conflict(StoreError):
    """The key's current revision differs from the one the caller based its write on."""


class Gone(StoreError):
    """The requested revision has been compacted away (HTTP 410 Expired)."""

    def __init__(self, key: str, requested: int, compacted: int) -> None:
        super().__init__(key, f"too old resource version: {requested} ({compacted})")
        self.requested = requested
        self.compacted = compacted


class FutureRevision(StoreError):
    """A read at a revision the store has not reached (etcd's ErrFutureRev)."""

    MESSAGE = "etcdserver: mvcc: required revision is a future revision"

    def __init__(self, key: str, requested: int, current: int) -> None:
        super().__init__(key, self.MESSAGE)
        self.requested = requested
        self.current = current


@dataclasses.dataclass(frozen=True)
class Event:
    type: EventType
    key: str
    object: dict  # for DELETED: the object as it was, with resourceVersion = the delete's revision
    revision: int
    prev: dict | None = None  # the previous state, when known (MODIFIED, DELETED)


@runtime_checkable
class Store(Protocol):
    """What the apiserver needs from a backend. All values are JSON-compatible dicts."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    @property
    def revision(self) -> int:
        """The latest committed revision (of a write under this store that its watches deliver).

        A watch from an earlier revision always reaches it, so "wait until my watch has seen
        `revision`" (read-your-writes) terminates; with etcd, writes to other keys do not count.
        """
        ...

    @property
    def compacted(self) -> int:
        """Revisions at or below this one can no longer be watched from."""
        ...

    async def create(self, key: str, obj: dict) -> dict:
        """Store a new key; return the object with its resourceVersion. AlreadyExists if present."""
        ...

    async def get(self, key: str, *, shared: bool = False) -> dict:
        """The current object, the caller's own copy (it may change it). NotFound if absent.

        `shared`: the caller only reads it and copies what it changes (the bind), so a store that keeps
        objects as dicts may hand out its own, stored (never changed in place) object."""
        ...

    async def list_at(self, prefix: str, revision: int) -> list[dict]:
        """Every object under `prefix` as it was at `revision` (etcd's range at a revision), sorted by key.

        Gone when the history that answers it has been compacted (or the backend keeps none);
        FutureRevision when `revision` is beyond the store's.
        """
        ...

    async def list(self, prefix: str) -> tuple[list[dict], int]:
        """Every object whose key starts with `prefix` (sorted by key), and the revision read at."""
        ...

    async def update(self, key: str, obj: dict, expected_revision: int | None = None, *,
                     owned: bool = False) -> dict:
        """Replace the object; Conflict if `expected_revision` is given and stale; NotFound if absent.

        `owned`: the caller hands `obj` over, never touches it again and drops the answer (the bind), so a
        store that keeps objects as dicts may keep this one without copying it in or out."""
        ...

    async def delete(self, key: str, expected_revision: int | None = None) -> dict:
        """Remove the key; return the last state (resourceVersion = the delete's revision)."""
        ...

    def watch(self, prefix: str, since: int) -> AsyncIterator[Event]:
        """Every change under `prefix` with revision > `since`, in order, then live changes.

        Raises Gone (at the first iteration) when `since` < `compacted`, and later if the
        watcher falls too far behind. `since=0` starts at the current revision.
        """
        ...

    async def compact(self, revision: int) -> None:
        """Forget history at or below `revision`."""
        ...


def rewind(prefix: str, revision: int, current: dict[str, T],
           changes: Sequence[tuple[str, str, T | None]]) -> list[T]:
    """The objects at `revision` from the `current` ones (key -> object) and every change after `revision`
    up to them, oldest first, as (type, key, the object before the change or None when unknown): a key's
    first change after `revision` says what it was then. Gone when that state is unknown (compacted)."""
    seen: set[str] = set()
    state: dict[str, T] = dict(current)
    for typ, key, prev in changes:
        if key in seen:
            continue
        seen.add(key)
        if typ == "ADDED":
            state.pop(key, None)
        elif prev is None:
            raise Gone(prefix, revision, revision)
        else:
            state[key] = prev
    return [state[k] for k in sorted(state)]


def with_revision(obj: dict, revision: int) -> dict:
    """A copy of `obj` whose metadata.resourceVersion is `revision`."""
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    meta["resourceVersion"] = str(revision)
    out["metadata"] = meta
    return out
