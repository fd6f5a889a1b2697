"""Three `nodeagent server`s on one etcd (Debian's etcd-server): writes on one are seen by watches on the
others, the `kubernetes` endpoints list exactly the live servers, and killing one leaves the rest working."""

from __future__ import annotations

import asyncio
import shutil
import signal

import pytest

from nodeagent.client import Client
from nodeagent.testing.apiserver import start_server
from nodeagent.testing.etcd import EtcdServer, available

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def etcd():
    reason = available()
    if reason:
        pytest.skip(reason)
    server = EtcdServer(name="apiserver-ha").start()
    try:
        yield server
    finally:
        server.stop()


def ports_of(ep: dict) -> set[int]:
    return {p["port"] for s in ep.get("subsets") or [] for p in s["ports"]}


async def test_three_servers_share_etcd_and_survive_one_dying(etcd, tmp_path):
    ds = f"etcd://{etcd.endpoint.split('://', 1)[-1]}"
    servers = [start_server(tmp_path / "s0", ds, extra=["--lease-duration", "3"])]
    for i in (1, 2):  # one cluster: the same CA and tokens on every server
        d = tmp_path / f"s{i}"
        shutil.copytree(tmp_path / "s0" / "pki", d / "pki")
        shutil.copy(tmp_path / "s0" / "tokens.csv", d / "tokens.csv")
        servers.append(start_server(d, ds, extra=["--lease-duration", "3"]))
    clients = [Client.from_kubeconfig(s.kubeconfig) for s in servers]
    try:
        # writes on s0 are seen by a watch on s2
        rv = (await clients[2].list("configmaps", "default"))["metadata"]["resourceVersion"]
        seen: list[str] = []

        async def watch() -> None:
            async for ev in clients[2].watch("configmaps", "default", rv, bookmarks=False):
                if ev["object"]["metadata"]["name"].startswith("from-"):
                    seen.append(ev["object"]["metadata"]["name"])
                if len(seen) == 2:
                    return

        w = asyncio.create_task(watch())
        await asyncio.sleep(0.3)
        await clients[0].create("configmaps", {"metadata": {"name": "from-s0"}}, "default")
        await clients[1].create("configmaps", {"metadata": {"name": "from-s1"}}, "default")
        await asyncio.wait_for(w, 20)
        assert seen == ["from-s0", "from-s1"]
        want = {s.port for s in servers}
        for _ in range(100):
            ep = await clients[1].get("endpoints", "kubernetes", "default")
            if ports_of(ep) == want:
                break
            await asyncio.sleep(0.2)
        assert ports_of(ep) == want
        # kill -9 one: the others keep working and the endpoints drop it
        servers[0].proc.send_signal(signal.SIGKILL)
        servers[0].proc.wait()
        await clients[1].create("configmaps", {"metadata": {"name": "after-kill"}}, "default")
        got = await clients[2].get("configmaps", "after-kill", "default")
        assert got["metadata"]["name"] == "after-kill"
        ca = [(s.data_dir / "pki" / "ca.crt").read_bytes() for s in servers]
        assert ca[0] == ca[1] == ca[2]
        want = {servers[1].port, servers[2].port}
        for _ in range(150):
            ep = await clients[2].get("endpoints", "kubernetes", "default")
            if ports_of(ep) == want:
                break
            await asyncio.sleep(0.2)
        assert ports_of(ep) == want
    finally:
        for c in clients:
            await c.close()
        for s in servers:
            s.stop()
