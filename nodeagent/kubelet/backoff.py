"""CrashLoopBackOff and image-pull backoff (client-go flowcontrol.Backoff as the kubelet uses it).

Per key: the first failure waits 10 s, each further one doubles up to 5 min; an entry that has not been
updated for twice the maximum (10 min: the container ran that long) starts again from 10 s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nodeagent.clock import REAL_CLOCK, Clock
from nodeagent.kubelet.status import container_hash

INITIAL_BACKOFF = 10.0
MAX_CONTAINER_BACKOFF = 300.0
MAX_IMAGE_BACKOFF = 300.0


@dataclasses.dataclass
class _Entry:
    backoff: float
    last_update: float


class Backoff:
    """flowcontrol.Backoff: `next(key, t)` records a failure at t, `in_backoff_since(key, t)` asks whether
    an attempt at t is still too early."""

    def __init__(self, initial: float = INITIAL_BACKOFF, maximum: float = MAX_CONTAINER_BACKOFF,
                 clock: Clock | None = None) -> None:
        self.initial = initial
        self.maximum = maximum
        self.clock = clock or REAL_CLOCK
        self._entries: dict[str, _Entry] = {}

    def _expired(self, event_time: float, last_update: float) -> bool:
        return event_time - last_update > self.maximum * 2

    def get(self, key: str) -> float:
        """The current delay for key (0 when none)."""
        e = self._entries.get(key)
        return e.backoff if e else 0.0

    def next(self, key: str, event_time: float | None = None) -> float:
        """Record a failure at event_time; returns the new delay."""
        t = self.clock.now() if event_time is None else event_time
        e = self._entries.get(key)
        if e is None or self._expired(t, e.last_update):
            e = self._entries[key] = _Entry(self.initial, t)
        else:
            e.backoff = min(e.backoff * 2, self.maximum)
            e.last_update = t
        return e.backoff

    def in_backoff_since(self, key: str, event_time: float) -> bool:
        """True while now - event_time is shorter than the delay (event_time: when the container exited)."""
        e = self._entries.get(key)
        if e is None:
            return False
        if self._expired(event_time, e.last_update):
            return False  # it ran (or stayed quiet) for twice the maximum since the last failure
        return self.clock.now() - event_time < e.backoff

    def in_backoff_since_update(self, key: str, event_time: float | None = None) -> bool:
        """True while the delay since the last recorded failure has not elapsed (image pulls)."""
        e = self._entries.get(key)
        if e is None:
            return False
        t = self.clock.now() if event_time is None else event_time
        if self._expired(t, e.last_update):
            return False
        return t - e.last_update < e.backoff

    def reset(self, key: str) -> None:
        self._entries.pop(key, None)

    def gc(self) -> None:
        """Drop entries untouched for twice the maximum (flowcontrol GC)."""
        now = self.clock.now()
        for key in [k for k, e in self._entries.items() if self._expired(now, e.last_update)]:
            del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)


def format_pod(pod: Mapping[str, Any]) -> str:
    """format.Pod: "name_namespace(uid)"."""
    m = pod.get("metadata") or {}
    return f"{m.get('name', '')}_{m.get('namespace', '')}({m.get('uid', '')})"


def container_backoff_key(pod: Mapping[str, Any], container: Mapping[str, Any]) -> str:
    """kuberuntime GetStableKey: pod name, namespace, uid, container name and its hash."""
    m = pod.get("metadata") or {}
    return (f"{m.get('name')}_{m.get('namespace')}_{m.get('uid')}_{container.get('name')}_"
            f"{container_hash(container):x}")


@dataclasses.dataclass(frozen=True)
class BackoffDecision:
    in_backoff: bool
    reason: str = ""  # "CrashLoopBackOff" / "ImagePullBackOff"
    message: str = ""


def _fmt_duration(seconds: float) -> str:
    """Go's time.Duration String for whole seconds: 10s, 2m40s, 5m0s."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s}s"
    h, m = divmod(m, 60)
    return f"{h}h{m}m{s}s"


class CrashLoopBackoff:
    """The restart gate of a pod worker: before restarting an exited container, ask `check`."""

    def __init__(self, clock: Clock | None = None, initial: float = INITIAL_BACKOFF,
                 maximum: float = MAX_CONTAINER_BACKOFF) -> None:
        self.backoff = Backoff(initial, maximum, clock)

    def check(self, pod: Mapping[str, Any], container: Mapping[str, Any],
              finished_at: float) -> BackoffDecision:
        """doBackOff: in backoff → CrashLoopBackOff with kubelet's message; otherwise record this restart."""
        key = container_backoff_key(pod, container)
        if self.backoff.in_backoff_since(key, finished_at):
            msg = (f"back-off {_fmt_duration(self.backoff.get(key))} restarting failed "
                   f"container={container.get('name')} pod={format_pod(pod)}")
            return BackoffDecision(True, "CrashLoopBackOff", msg)
        self.backoff.next(key, finished_at)
        return BackoffDecision(False)


class ImagePullBackoff:
    """The image manager's gate: after a failed pull, further pulls wait (ErrImagePull → ImagePullBackOff)."""

    def __init__(self, clock: Clock | None = None, initial: float = INITIAL_BACKOFF,
                 maximum: float = MAX_IMAGE_BACKOFF) -> None:
        self.backoff = Backoff(initial, maximum, clock)

    @staticmethod
    def key(pod: Mapping[str, Any], image: str) -> str:
        return f"{(pod.get('metadata') or {}).get('uid')}_{image}"

    def check(self, pod: Mapping[str, Any], image: str) -> BackoffDecision:
        if self.backoff.in_backoff_since_update(self.key(pod, image)):
            return BackoffDecision(True, "ImagePullBackOff", f'Back-off pulling image "{image}"')
        return BackoffDecision(False)

    def failed(self, pod: Mapping[str, Any], image: str) -> float:
        """Record a failed pull; returns the delay before the next attempt."""
        return self.backoff.next(self.key(pod, image))

    def succeeded(self, pod: Mapping[str, Any], image: str) -> None:
        self.backoff.reset(self.key(pod, image))
