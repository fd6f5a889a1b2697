"""kill -9 the server (SQLite store) during a stream of writes: every acknowledged write survives the restart,
and nothing unacknowledged is half-present."""

from __future__ import annotations

import asyncio
import signal

import pytest

from nodeagent.client import Client, ClientError
from nodeagent.testing.apiserver import start_server

pytestmark = pytest.mark.slow


async def _writer(c: Client, w: int, acked: list[str], tried: list[str]) -> None:
    i = 0
    while True:
        name = f"cm-{w}-{i}"
        tried.append(name)
        try:
            await c.create("configmaps",
                           {"metadata": {"name": name}, "data": {"i": str(i), "pad": "x" * 200}},
                           "default")
        except ClientError:
            return
        acked.append(name)
        i += 1


async def test_kill9_keeps_every_acknowledged_write(tmp_path):
    srv = start_server(tmp_path, "sqlite")
    acked: list[str] = []
    tried: list[str] = []
    try:
        c = Client.from_kubeconfig(srv.kubeconfig)
        tasks = [asyncio.create_task(_writer(c, w, acked, tried)) for w in range(4)]
        for _ in range(1200):
            if len(acked) >= 200:
                break
            await asyncio.sleep(0.05)
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        await c.close()
    finally:
        srv.stop()
    srv2 = start_server(tmp_path, "sqlite")
    try:
        c = Client.from_kubeconfig(srv2.kubeconfig)
        listed = (await c.list("configmaps", "default"))["items"]
        items = [o for o in listed if o["metadata"]["name"].startswith("cm-")]
        names = {o["metadata"]["name"] for o in items}
        assert set(acked) <= names
        assert names <= set(tried)
        for o in items:  # whole objects, never torn
            assert o["data"]["pad"] == "x" * 200 and o["metadata"]["uid"]
        # the server still works and revisions keep increasing after the restart
        last = max(int(o["metadata"]["resourceVersion"]) for o in items)
        new = await c.create("configmaps", {"metadata": {"name": "after"}}, "default")
        assert int(new["metadata"]["resourceVersion"]) > last
        await c.close()
    finally:
        assert srv2.stop() == 0
