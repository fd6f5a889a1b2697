"""Container logs as the kubelet serves them (pkg/kubelet/kuberuntime/logs): CRI log files → plain content.

A CRI log line is `<RFC3339Nano time> <stdout|stderr> <P|F> <content>`; a `P` (partial) record's
content continues in the next record, an `F` one ends the line. The kubelet strips the prefix, keeps the
content (with the newline an `F` record implies), optionally re-prefixes the timestamp, and honours
tailLines, sinceTime/sinceSeconds, limitBytes and follow. Following keeps reading while the container
runs, reopening the file when it is rotated (a new inode at the path) or truncated.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

BLOCK = 64 * 1024
_RFC3339 = re.compile(r"(?P<main>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?"
                      r"(?P<zone>[Zz]|[+-]\d\d:\d\d)")


@dataclasses.dataclass
class LogOptions:
    tail_lines: int | None = None
    since: float | None = None  # epoch seconds: records older are skipped
    timestamps: bool = False
    limit_bytes: int | None = None
    follow: bool = False


@dataclasses.dataclass(frozen=True)
class Record:
    time: float  # epoch seconds (sub-second precision kept)
    raw_time: bytes  # the timestamp as written, re-emitted with ?timestamps=true
    stream: bytes
    partial: bool
    content: bytes


def parse_time(raw: bytes) -> float:
    """RFC3339Nano → epoch seconds (fractions beyond microseconds only matter when re-emitted raw)."""
    m = _RFC3339.fullmatch(raw.decode("ascii", "replace"))
    if m is None:
        raise ValueError(f"not an RFC3339 time: {raw!r}")
    zone = "+00:00" if m["zone"] in ("Z", "z") else m["zone"]
    t = dt.datetime.fromisoformat(m["main"] + zone).timestamp()
    return t + (float("0." + m["frac"]) if m["frac"] else 0.0)


def parse_line(line: bytes) -> Record | None:
    """One CRI log line (without its newline) → Record; None for a malformed line (skipped, as kubelet logs
    it)."""
    parts = line.split(b" ", 3)
    if len(parts) < 3 or parts[1] not in (b"stdout", b"stderr"):
        return None
    try:
        t = parse_time(parts[0])
    except ValueError:
        return None
    tag = parts[2].split(b":", 1)[0]
    return Record(t, parts[0], parts[1], tag == b"P", parts[3] if len(parts) > 3 else b"")


def render(rec: Record, timestamps: bool) -> bytes:
    out = rec.content if rec.partial else rec.content + b"\n"
    return rec.raw_time + b" " + out if timestamps else out


def tail_offset(f, lines: int) -> int:
    """Byte offset where the last `lines` lines of the open file start (reading backwards in blocks)."""
    end = f.seek(0, os.SEEK_END)
    if lines <= 0:
        return end
    pos, found = end, 0
    # the file normally ends with a newline: that one does not start a line
    skip_last = True
    while pos > 0:
        start = max(0, pos - BLOCK)
        f.seek(start)
        buf = f.read(pos - start)
        i = len(buf)
        while True:
            i = buf.rfind(b"\n", 0, i)
            if i < 0:
                break
            if skip_last and start + i == end - 1:
                skip_last = False
                continue
            skip_last = False
            found += 1
            if found == lines:
                return start + i + 1
        pos = start
    return 0


class _Limit:
    def __init__(self, limit: int | None) -> None:
        self.left = limit

    def take(self, data: bytes) -> tuple[bytes, bool]:
        """The part of `data` still allowed, and whether the limit is now reached."""
        if self.left is None:
            return data, False
        data = data[:self.left]
        self.left -= len(data)
        return data, self.left <= 0


async def read_logs(path: str | Path, opts: LogOptions, running: Callable[[], Awaitable[bool]],
                    poll: float = 0.1) -> AsyncIterator[bytes]:
    """Yield the rendered log content of one container's log file.

    `running()` says whether the container still runs; following ends once it does not and the file
    is drained. The file is read in a thread only where a read could be large (tail seek); reads of a
    local file in 64 KiB steps are otherwise cheap enough for the loop."""
    limit = _Limit(opts.limit_bytes)
    f = await asyncio.to_thread(open, path, "rb")
    try:
        tail = opts.tail_lines
        if tail is not None:
            await asyncio.to_thread(lambda: f.seek(tail_offset(f, tail)))
        ino = os.fstat(f.fileno()).st_ino
        pending = b""
        idle_checks = 0
        while True:
            chunk = f.read(BLOCK)
            if chunk:
                idle_checks = 0
                pending += chunk
                *lines, pending = pending.split(b"\n")
                out = []
                for line in lines:
                    rec = parse_line(line)
                    if rec is None or (opts.since is not None and rec.time < opts.since):
                        continue
                    out.append(render(rec, opts.timestamps))
                if out:
                    data, done = limit.take(b"".join(out))
                    if data:
                        yield data
                    if done:
                        return
                continue
            if not opts.follow:
                return
            # EOF: rotated (new inode at the path) or truncated → reopen; stopped → drain and end.
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            if st is not None and (st.st_ino != ino or st.st_size < f.tell()):
                f.close()
                f = await asyncio.to_thread(open, path, "rb")
                ino = os.fstat(f.fileno()).st_ino
                pending = b""
                continue
            idle_checks += 1
            if idle_checks % 5 == 0 and not await running():
                if not f.read(1):  # nothing was written between the last read and the check
                    return
                f.seek(-1, os.SEEK_CUR)
            await asyncio.sleep(poll)
    finally:
        f.close()
