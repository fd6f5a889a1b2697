"""Shared fixtures: a real `nodeagent server` (its own controllers off), in-process controllers,
hollow nodes."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from nodeagent.client.rest import Client, ClientError
from nodeagent.controllers.manager import CONTROLLERS, run_controllers
from nodeagent.controllers.options import ControllerOptions
from nodeagent.testing.apiserver import start_server
from nodeagent.testing.hollow import HollowNodes
from tests.harness.resources import unique

REPO = Path(__file__).resolve().parents[3]
KUBECTLS = {"1.32": shutil.which("kubectl") or "/usr/bin/kubectl",
            "1.20": str(REPO / ".cache/kubectl-1.20/usr/bin/kubectl")}


@pytest.fixture(scope="package")
def server(tmp_path_factory):
    # The tests run the controllers in-process (with their own settings): the server runs none.
    # The controllers under test run in the test process: the server runs neither its own nor a scheduler
    # (the hollow nodes bind), so exactly one of each acts.
    srv = start_server(tmp_path_factory.mktemp("ctl-apiserver"),
                       extra=["--controllers=none", "--without", "scheduler"])
    yield srv
    assert srv.stop() == 0, srv.log()


@dataclasses.dataclass
class Env:
    client: Client
    ns: str
    nodes: HollowNodes


@contextlib.asynccontextmanager
async def cluster_env(server, options: ControllerOptions | None = None, n_nodes: int = 2,
                      labels: dict[str, dict[str, str]] | None = None, controllers=CONTROLLERS,
                      heartbeat: float = 1.0):
    """A client, the controllers, and hollow nodes that heartbeat, bind and run pods; a fresh namespace."""
    client = Client.from_kubeconfig(server.kubeconfig)
    ns = unique("ns").lower()
    await client.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    names = [f"{ns}-n{i + 1}" for i in range(n_nodes)]
    node_labels = {f"{ns}-n{int(k)}" if k.isdigit() else k: v for k, v in (labels or {}).items()}
    nodes = HollowNodes(client, names, bind=True, heartbeat=heartbeat, labels=node_labels)
    await nodes.register()
    ready = asyncio.Event()
    try:
        async with asyncio.TaskGroup() as tg:
            ctl = tg.create_task(run_controllers(client, ready, controllers=controllers, options=options))
            hollow = tg.create_task(nodes.run())
            await asyncio.wait_for(ready.wait(), 30)
            try:
                yield Env(client, ns, nodes)
            finally:
                ctl.cancel()
                hollow.cancel()
    finally:
        with contextlib.suppress(ClientError):
            await client.delete("namespaces", ns)
        await nodes.remove()
        await client.close()


@pytest.fixture
async def cluster(server):
    async with cluster_env(server) as env:
        yield env.client, env.ns


def kubectl(version, server, *args, check=True, input=None):
    binary = KUBECTLS[version]
    if not Path(binary).exists():
        pytest.skip(f"kubectl {version} not found at {binary} (run make install)")
    p = subprocess.run([binary, *args], capture_output=True, text=True, env=server.env(),
                       timeout=120, input=input)
    if check:
        assert p.returncode == 0, f"kubectl {' '.join(args)}: {p.stdout}\n{p.stderr}"
    return p


def template(app: str, image: str = "localhost/busybox:latest", **spec) -> dict:
    return {"metadata": {"labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": image, "command": ["sleep", "3600"]}], **spec}}


async def pods_of(client, ns, app):
    items = (await client.list("pods", ns, label_selector=f"app={app}"))["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]
