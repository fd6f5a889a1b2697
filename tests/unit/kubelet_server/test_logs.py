"""CRI log files → the content the kubelet serves (tail, since, timestamps, limit, partial lines, follow)."""

from __future__ import annotations

import asyncio
import os

import pytest

from nodeagent.kubelet.server.logs import LogOptions, parse_line, parse_time, read_logs, tail_offset


def _write(path, *records: str) -> None:
    with open(path, "a") as f:
        for r in records:
            f.write(r + "\n")


def _collect(path, opts: LogOptions, running=None) -> bytes:
    async def go() -> bytes:
        async def still() -> bool:
            return running() if running else False
        return b"".join([c async for c in read_logs(path, opts, still, poll=0.01)])
    return asyncio.run(go())


def test_parse_line_and_time():
    r = parse_line(b"2016-10-06T00:17:09.669794202Z stdout F hello world")
    assert r is not None and r.stream == b"stdout" and not r.partial and r.content == b"hello world"
    assert r.time == pytest.approx(1475713029.669794, abs=1e-6)
    r = parse_line(b"2016-10-06T00:17:09Z stderr P part")
    assert r is not None and r.partial
    r = parse_line(b"2016-10-06T00:17:09Z stdout F")
    assert r is not None and r.content == b""
    assert parse_line(b"garbage line") is None
    assert parse_time(b"2016-10-06T02:17:09.5+02:00") == pytest.approx(1475713029.5)


def test_content_is_stripped_partial_lines_joined_and_stderr_kept(tmp_path):
    p = tmp_path / "0.log"
    _write(p, "2024-01-01T00:00:00.1Z stdout P hel", "2024-01-01T00:00:00.2Z stdout F lo",
           "2024-01-01T00:00:00.3Z stderr F oops", "not a cri line", "2024-01-01T00:00:00.4Z stdout F bye")
    assert _collect(p, LogOptions()) == b"hello\noops\nbye\n"


def test_tail_since_timestamps_and_limit(tmp_path):
    p = tmp_path / "0.log"
    _write(p, *[f"2024-01-01T00:00:{i:02d}.000000001Z stdout F line {i}" for i in range(50)])
    assert _collect(p, LogOptions(tail_lines=3)) == b"line 47\nline 48\nline 49\n"
    assert _collect(p, LogOptions(tail_lines=0)) == b""
    assert _collect(p, LogOptions(tail_lines=500)).count(b"\n") == 50
    since = parse_time(b"2024-01-01T00:00:48Z")
    assert _collect(p, LogOptions(since=since)) == b"line 48\nline 49\n"
    stamped = _collect(p, LogOptions(tail_lines=1, timestamps=True))
    assert stamped == b"2024-01-01T00:00:49.000000001Z line 49\n"
    assert _collect(p, LogOptions(limit_bytes=9)) == b"line 0\nli"


def test_tail_offset_across_blocks(tmp_path):
    p = tmp_path / "big.log"
    line = "2024-01-01T00:00:00Z stdout F " + "x" * 1000
    _write(p, *[line] * 300)  # ~310 KB: several 64 KiB blocks
    with open(p, "rb") as f:
        off = tail_offset(f, 100)
        f.seek(off)
        assert f.read().count(b"\n") == 100


def test_follow_reads_new_lines_through_rotation_and_ends_when_stopped(tmp_path):
    p = tmp_path / "0.log"
    _write(p, "2024-01-01T00:00:00Z stdout F first")
    state = {"running": True}

    async def go() -> list[bytes]:
        got: list[bytes] = []

        async def running() -> bool:
            return state["running"]

        async def writer() -> None:
            await asyncio.sleep(0.05)
            _write(p, "2024-01-01T00:00:01Z stdout F second")
            await asyncio.sleep(0.1)
            os.rename(p, tmp_path / "0.log.1")  # rotated: a new file at the path
            _write(p, "2024-01-01T00:00:02Z stdout F third")
            await asyncio.sleep(0.1)
            state["running"] = False

        t = asyncio.create_task(writer())
        async for chunk in read_logs(p, LogOptions(follow=True), running, poll=0.01):
            got.append(chunk)
        await t
        return got

    assert b"".join(asyncio.run(asyncio.wait_for(go(), 10))) == b"first\nsecond\nthird\n"
