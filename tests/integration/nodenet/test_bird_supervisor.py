"""The supervised BIRD (`nodenet.bird.Bird`) with the real daemon: a render is checked before it is loaded
and a refused one leaves the running BIRD alone, a change is a `birdc configure` (same process), BIRD killed
is restarted with backoff, a BIRD left by a killed agent is adopted (or stopped by `nodeagent reset`), and
stopping leaves no process, socket or pid file. The config announces nothing, so the host's routes are
untouched."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time

import pytest

from nodeagent.nodenet import birdconf as bc
from nodeagent.nodenet.bird import Bird, InvalidConfig, _alive

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(not shutil.which("bird"), reason="BIRD 2 is not installed (make install)")]


def conf(bird: Bird, router_id: str = "192.0.2.1") -> str:
    return bc.render(bc.BirdSettings("n1", router_id, 64512, "10.250.0.0/16", None,
                                     log_file=bird.files.log_file))


async def wait_for(what: str, ok, within: float = 20.0):
    end = asyncio.get_running_loop().time() + within
    while True:
        got = ok()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return got
        assert asyncio.get_running_loop().time() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def exists(path: str) -> bool:
    return os.path.exists(path)


def daemon(bird: Bird) -> int:
    """BIRD started as a daemon of its own on the directory's files (as a killed agent leaves it)."""
    subprocess.run(["bird", "-c", bird.files.config, "-s", bird.files.socket, "-P", bird.files.pid_file],
                   check=True)
    for _ in range(200):
        if os.path.exists(bird.files.pid_file) and read(bird.files.pid_file).strip():
            return int(read(bird.files.pid_file))
        time.sleep(0.05)
    raise AssertionError("BIRD wrote no pid file")


def test_supervised_bird(tmp_path, caplog):
    caplog.set_level("INFO", logger="nodeagent.nodenet.bird")

    async def main() -> None:
        bird = Bird(tmp_path / "bird")
        assert await bird.apply(conf(bird)) == "installed"
        task = asyncio.create_task(bird.run())
        try:
            await wait_for("BIRD answering", bird.answers)
            first = bird.pid
            assert first and _alive(first)
            # unchanged, then refused (the running one keeps its config), then reloaded in place
            assert await bird.apply(conf(bird)) == "unchanged"
            with pytest.raises(InvalidConfig, match="syntax error"):
                await bird.apply(conf(bird).replace("router id 192.0.2.1;", "router id;"))
            assert bird.pid == first and "192.0.2.1" in read(bird.files.config)
            assert await bird.apply(conf(bird, "192.0.2.7")) == "reconfigured"
            assert bird.pid == first
            status = await bird.command("show", "status")
            assert "Router ID is 192.0.2.7" in status
            # killed: restarted after the backoff, with the installed config
            os.kill(first, signal.SIGKILL)
            second = await wait_for("a new BIRD", lambda: bird.pid not in (None, first) and bird.pid)
            await wait_for("the new BIRD answering", bird.answers)
            assert bird.restarts == 1 and "Router ID is 192.0.2.7" in await bird.command("show", "status")
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert not _alive(second)
        assert not exists(bird.files.socket) and not exists(bird.files.pid_file)

    asyncio.run(main())
    said = caplog.text
    assert "BIRD exited (signal 9); restarting in 1s" in said and "bird: <INFO> Reconfigured" in said


def test_left_over_bird_is_adopted_or_stopped(tmp_path):
    async def main() -> None:
        bird = Bird(tmp_path / "bird")
        os.makedirs(bird.files.directory)
        (tmp_path / "bird" / "bird.conf").write_text(conf(bird))
        # a BIRD an earlier (killed) agent left: daemonized, not our child
        pid = await asyncio.to_thread(daemon, bird)
        task = asyncio.create_task(bird.run())
        try:
            await wait_for("adopted", lambda: bird.pid == pid)
            assert await bird.apply(conf(bird, "192.0.2.9")) == "reconfigured" and bird.pid == pid
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        await wait_for("the adopted BIRD stopped", lambda: not _alive(pid))
        # and one that nobody adopts: nodeagent reset's way
        pid = await asyncio.to_thread(daemon, bird)
        assert await Bird(bird.files.directory).stop_left_over()
        await wait_for("the left-over BIRD stopped", lambda: not _alive(pid))
        assert not await Bird(bird.files.directory).stop_left_over()

    asyncio.run(main())
