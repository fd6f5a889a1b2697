"""The supervised HAProxy alone (`nodeagent.ingress.proxy.HAProxy`): a render that does not validate
never replaces the running one (which keeps serving), a dead master is restarted with the last good
config, and endpoint-only changes go through the runtime API without a new worker."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
from pathlib import Path

import pytest

from nodeagent.ingress.haproxy import Listen, Rendered, render
from nodeagent.ingress.model import ANY, Backend, Desired, Endpoint, Route
from nodeagent.ingress.proxy import HAProxy, InvalidConfig
from nodeagent.ingress.service import ensure_default_certificate
from tests.integration.ingress.conftest import Backend as HTTPBackend
from tests.integration.ingress.conftest import free_port

pytestmark = pytest.mark.e2e


def desired(port: int, *ips: str) -> Desired:
    be = Backend("be_1", tuple((Endpoint(ip, port), 1) for ip in ips), "default/web:80")
    return Desired((Route("", ANY, "/", False, "be_1"),), {"be_1": be}, {}, None, (), ())


async def get(port: int) -> str:
    p = await asyncio.create_subprocess_exec("curl", "-sS", "-m", "3", f"http://127.0.0.1:{port}/",
                                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = await p.communicate()
    return out.decode()


async def test_invalid_config_restart_and_runtime_updates(tmp_path: Path,
                                                          backends: tuple[int, list[HTTPBackend]]) -> None:
    port, _ = backends
    proxy = HAProxy("haproxy", tmp_path)
    ensure_default_certificate(proxy.files.default_certificate)
    listen = Listen("127.0.0.1", free_port("127.0.0.1"), free_port("127.0.0.1"))
    started = asyncio.Event()
    task = asyncio.create_task(proxy.run(started))
    try:
        first = render(desired(port, "127.0.0.2"), listen, proxy.files, [])
        assert await proxy.apply(first, {}) == "installed"
        await asyncio.wait_for(started.wait(), 20)
        assert (await get(listen.http_port)).startswith("pod2")

        good_text = proxy.config.read_text()
        bad = good_text.replace("balance roundrobin", "balance no-such-algorithm")
        broken = Rendered(bad, "other", {}, "")
        with pytest.raises(InvalidConfig, match="balance only supports"):
            await proxy.apply(broken, {})
        assert proxy.config.read_text() == good_text and proxy.reloads == 0
        assert (await get(listen.http_port)).startswith("pod2")

        # endpoints alone: the runtime API, the same worker
        worker = (await proxy.command("show info")).split("Pid: ")[1].split()[0]
        moved = render(desired(port, "127.0.0.3", "127.0.0.4"), listen, proxy.files, [])
        assert await proxy.apply(moved, {}) == "runtime"
        seen = {(await get(listen.http_port)).split()[0] for _ in range(6)}
        assert seen == {"pod3", "pod4"}
        assert (await proxy.command("show info")).split("Pid: ")[1].split()[0] == worker
        assert "127.0.0.3:" in proxy.config.read_text()  # a restart starts from the same endpoints

        # a new structure: a reload, a new worker
        more = dataclasses.replace(desired(port, "127.0.0.2"), default_backend="be_1")
        assert await proxy.apply(render(more, listen, proxy.files, []), {}) == "reloaded"
        assert (await proxy.command("show info")).split("Pid: ")[1].split()[0] != worker

        # the master dies: restarted with the last good config
        master = proxy.pid
        assert master is not None
        os.kill(master, signal.SIGKILL)
        for _ in range(200):
            if proxy.pid not in (None, master) and (await get(listen.http_port)).startswith("pod2"):
                break
            await asyncio.sleep(0.05)
        assert proxy.restarts == 1 and proxy.pid not in (None, master)
        assert (await get(listen.http_port)).startswith("pod2")
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert proxy.pid is None
