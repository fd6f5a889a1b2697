"""Kubernetes time strings: metav1.Time (seconds, UTC, "Z"), MicroTime (leases, events), and parsing."""

from __future__ import annotations

import datetime as dt
import functools
import re
import time


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def format_time(t: dt.datetime) -> str:
    """metav1.Time: RFC 3339 with second precision."""
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro(t: dt.datetime) -> str:
    """metav1.MicroTime (Lease renewTime, Event eventTime): microsecond precision."""
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_rfc3339() -> str:
    # every create and bind stamps one: each second formatted once (strftime was 1 % of the server's CPU)
    return _rfc3339(int(time.time()))


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


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """A Go duration (metav1.Duration, a component flag: "15s", "1m0.5s", "500ms", "1h30m") in seconds;
    ValueError when it is not one."""
    v = text.strip()
    sign = -1.0 if v.startswith("-") else 1.0
    v = v.lstrip("+-")
    if v == "0":
        return 0.0
    parts = _DURATION_PART.findall(v)
    if not parts or "".join(n + u for n, u in parts) != v:
        raise ValueError(f"invalid duration {text!r}")
    return sign * sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def format_duration(seconds: float) -> str:
    """Go's time.Duration.String(), how metav1.Duration is written: "15.002s", "1m0.5s", "250ms"."""
    ns = round(seconds * 1e9)
    if ns == 0:
        return "0s"
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if ns >= size:
                whole, frac = divmod(ns, size)
                tail = f"{frac:0{len(str(size)) - 1}d}".rstrip("0") if size > 1 else ""
                return f"{sign}{whole}{'.' + tail if tail else ''}{unit}"
    secs, frac = divmod(ns, 1_000_000_000)
    tail = f"{frac:09d}".rstrip("0")
    h, rem = divmod(secs, 3600)
    m, s = divmod(rem, 60)
    out = f"{s}{'.' + tail if tail else ''}s"
    if h or m:
        out = f"{m}m{out}"
    if h:
        out = f"{h}h{out}"
    return sign + out

