"""kill -9 during a stream of writes: every acknowledged write survives, nothing is half-written."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeagent.store import SQLITE_FILE
from nodeagent.store.sqlite import SQLiteStore, verify

ROOT = Path(__file__).resolve().parents[3]


def run_and_kill(datastore: str, data_dir: str, acks: int, run: str = "0") -> list[list[str]]:
    """Start the crash writer, SIGKILL it once `acks` writes are acknowledged; every acknowledged line."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.unit.store.crash_writer", datastore, data_dir, run],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    lines: list[list[str]] = []
    try:
        deadline = time.monotonic() + 60
        while len(lines) < acks and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith(("C ", "U ")) and line.endswith("\n"):
                lines.append(line.split())
        err = proc.stderr.read() if len(lines) < acks and proc.poll() is not None else ""
        assert len(lines) >= acks, f"writer stopped early: {err}"
        os.kill(proc.pid, signal.SIGKILL)  # mid-stream: it is still writing
        proc.wait(10)
        assert proc.returncode == -signal.SIGKILL
        # Whatever it printed before dying was acknowledged too (a torn last line is not counted).
        for line in proc.stdout.read().splitlines(keepends=True):
            if line.startswith(("C ", "U ")) and line.endswith("\n"):
                lines.append(line.split())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return lines


async def check_acknowledged(store, lines: list[list[str]]) -> None:
    created = {}
    updated = {}
    for rec in lines:
        if rec[0] == "C":
            created[rec[1]] = int(rec[2])
        else:
            updated[rec[1]] = int(rec[2])
    for key, rev in created.items():
        obj = await store.get(key)  # NotFound here = an acknowledged create was lost
        assert obj["spec"]["key"] == key
        assert int(obj["metadata"]["resourceVersion"]) >= rev
        if key in updated:
            assert int(obj["metadata"]["resourceVersion"]) == updated[key]
            assert obj["spec"]["generation"] == 1
    assert store.revision >= max([*created.values(), *updated.values()])


@pytest.mark.slow
@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
async def test_sqlite_kill_9_loses_no_acknowledged_write(tmp_path, synchronous):
    data_dir = str(tmp_path)
    path = os.path.join(data_dir, SQLITE_FILE)
    lines: list[list[str]] = []
    for run, acks in enumerate((1000, 3000, 5000)):  # three crashes into one file, at different points
        lines += run_and_kill(f"sqlite:{synchronous}", data_dir, acks, str(run))
        assert verify(path) == []
        store = SQLiteStore(path)
        await store.start()
        try:
            await check_acknowledged(store, lines)
            items, rev = await store.list("/crash/")
            assert rev == store.revision and len(items) >= len({r[1] for r in lines})
            # The reopened store carries on from the recovered revision.
            after = await store.delete(items[0]["spec"]["key"])
            assert int(after["metadata"]["resourceVersion"]) == rev + 1
            lines = [r for r in lines if r[1] != items[0]["spec"]["key"]]
        finally:
            await store.close()
        assert verify(path) == []
