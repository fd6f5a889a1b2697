"""kube-apiserver's max-in-flight filter (`--max-requests-inflight`, `--max-mutating-requests-inflight`).

Two pools, read-only (get, list) and mutating (everything else), each with its own limit (0: none).
A request that finds its pool full is refused at once, never queued: 429 TooManyRequests with
`Retry-After: 1`, which client-go (kubectl, the controllers) honours by retrying after a second, so an
overloaded server sheds work instead of letting answers hang. The answer is kube's `tooManyRequests`:
Go's `http.Error` plain text, not a Status (client-go reads both the same way). Long-running requests
(watch, proxy, and the exec, attach, portforward, log and proxy subresources) hold no slot, and members
of system:masters are always served, as kube's filter does. It runs after authentication and
impersonation, so a refused request costs one token check.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from nodeagent.apiserver import errors
from nodeagent.apiserver.auth import MASTERS_GROUP
from nodeagent.apiserver.metrics import Metrics
from nodeagent.apiserver.request import parse

DEFAULT_READ_ONLY = 400  # kube-apiserver's defaults
DEFAULT_MUTATING = 200
RETRY_AFTER = 1  # seconds, as kube's filter answers
MESSAGE = "Too many requests, please try again later."
READ_ONLY_VERBS = frozenset({"get", "list", "watch"})
LONG_RUNNING_VERBS = frozenset({"watch", "proxy"})
LONG_RUNNING_SUBRESOURCES = frozenset({"attach", "exec", "proxy", "log", "portforward"})
READ_ONLY, MUTATING = "readOnly", "mutating"


def request_kind(method: str, path: str, query: Mapping[str, str]) -> str | None:
    """readOnly or mutating, or None for a long-running request (exempt). A path that is not a resource
    (discovery, /metrics) or one the server will refuse counts by its method, as kube's non-resource
    requests do."""
    try:
        info = parse(method, path, query)
    except errors.ApiError:
        info = None
    if info is None:
        return READ_ONLY if method in ("GET", "HEAD") else MUTATING
    if info.verb in LONG_RUNNING_VERBS or info.subresource in LONG_RUNNING_SUBRESOURCES:
        return None
    return READ_ONLY if info.verb in READ_ONLY_VERBS else MUTATING


class TooManyRequests(Exception):
    """A full pool refused the request; the HTTP boundary answers with `plain_answer`."""


def plain_answer() -> tuple[int, bytes, dict[str, str]]:
    """kube's answer (filters.tooManyRequests through Go's http.Error): status, body and headers."""
    return 429, (MESSAGE + "\n").encode(), {"Retry-After": str(RETRY_AFTER),
                                            "Content-Type": "text/plain; charset=utf-8",
                                            "X-Content-Type-Options": "nosniff"}


class InFlightLimit:
    def __init__(self, read_only: int = DEFAULT_READ_ONLY, mutating: int = DEFAULT_MUTATING,
                 metrics: Metrics | None = None) -> None:
        if read_only < 0 or mutating < 0:
            raise ValueError("max in-flight limits must be 0 (no limit) or more")
        self.limits = {READ_ONLY: read_only, MUTATING: mutating}
        self.current = {READ_ONLY: 0, MUTATING: 0}
        self.metrics = metrics

    @contextlib.contextmanager
    def admit(self, kind: str | None, groups: tuple[str, ...]) -> Iterator[None]:
        """Hold a slot of `kind`'s pool while the request is served; TooManyRequests when it is full."""
        if kind is None:
            yield
            return
        limit = self.limits[kind]
        if limit and self.current[kind] >= limit:
            if MASTERS_GROUP in groups:  # a super-user is always answered, and holds no slot
                yield
                return
            if self.metrics is not None:
                self.metrics.dropped.labels(kind).inc()
            raise TooManyRequests(kind)
        self.current[kind] += 1
        self._report(kind)
        try:
            yield
        finally:
            self.current[kind] -= 1
            self._report(kind)

    def _report(self, kind: str) -> None:
        if self.metrics is not None:
            self.metrics.child(self.metrics.inflight, (kind,)).set(self.current[kind])
