"""SIGTERM with watches open: the server ends the streams and exits 0 promptly;
a restart serves the same data."""

from __future__ import annotations

import asyncio
import time

from nodeagent.client import Client, ClientError
from nodeagent.testing.apiserver import start_server


async def test_sigterm_with_open_watches(tmp_path):
    srv = start_server(tmp_path, "sqlite")
    c = Client.from_kubeconfig(srv.kubeconfig, max_connections=20)
    await c.create("configmaps", {"metadata": {"name": "keep"}}, "default")
    ended = 0

    async def watch() -> None:
        nonlocal ended
        try:
            async for _ in c.watch("configmaps", "default"):
                pass
        except ClientError:
            pass
        ended += 1

    tasks = [asyncio.create_task(watch()) for _ in range(10)]
    await asyncio.sleep(0.5)
    t0 = time.monotonic()
    rc = await asyncio.to_thread(srv.stop)
    assert rc == 0, srv.log()
    assert time.monotonic() - t0 < 10
    await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert ended == 10
    await c.close()
    srv2 = start_server(tmp_path, "sqlite")
    try:
        c = Client.from_kubeconfig(srv2.kubeconfig)
        assert (await c.get("configmaps", "keep", "default"))["metadata"]["name"] == "keep"
        await c.close()
    finally:
        assert srv2.stop() == 0
