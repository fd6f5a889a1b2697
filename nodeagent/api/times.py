"""Kubernetes time strings: metav1.Time (seconds, UTC, "Z"), MicroTime (leases, events), and parsing."""

from __future__ import annotations

import datetime as dt
import functools


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def format_time(t: dt.datetime) -> str:
    """metav1.Time: RFC 3339 with second precision."""
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro(t: dt.datetime) -> str:
    """metav1.MicroTime (Lease renewTime, Event eventTime): microsecond precision."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_rfc3339() -> str:
    return format_time(now())


def parse_time(s: str | None) -> dt.datetime | None:
    """Either form back to an aware datetime; None for empty or malformed input."""
    if not s:
        return None
    try:
        return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None


def rfc3339(ts: float) -> str:
    """Epoch seconds as a metav1.Time string (second precision, UTC, "Z")."""
    return _rfc3339(int(ts))


@functools.lru_cache(maxsize=4096)
def _rfc3339(seconds: int) -> str:
    # Statuses repeat the same few timestamps (start times, transitions): format each once.
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(s: str) -> float:
    """A metav1.Time (or MicroTime) string back to epoch seconds."""
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
