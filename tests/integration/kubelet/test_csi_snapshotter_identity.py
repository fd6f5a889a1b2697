"""The node's CSI snapshotter under a joined node's own credential, on a real `nodeagent server`: kube gives
a node no VolumeSnapshot rights (external-snapshotter runs under its own ServiceAccount), so it does not
start, and says why and what to do in a Warning event on the Node; once the node's user is bound to the
snapshotter's ClusterRole it starts. Under the snapshot controller's ServiceAccount it may serve at once."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.client.events import EventRecorder
from nodeagent.client.rest import Client, ClientError
from nodeagent.kubelet.volumes import csisnapshotter
from nodeagent.kubelet.volumes.csi import Drivers
from nodeagent.testing.apiserver import ServerProcess, start_server
from tests.harness.node_credential import node_kubeconfig
from tests.harness.waiting import eventually

NODE = "snap-node"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("snap-api"), extra=["--without", "ingress"])
    yield srv
    srv.stop()


def admin(server: ServerProcess) -> Client:
    return Client(server.url, server.token, ca_file=str(server.ca_file))


async def test_a_node_credential_is_refused_with_what_to_do_then_started_once_bound(
        server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(csisnapshotter, "ACCESS_RECHECK", 0.5)
    node = Client.from_kubeconfig(str(node_kubeconfig(server, NODE, tmp_path / "node.kubeconfig")))
    recorder = EventRecorder(node, "kubelet", NODE)
    snap = csisnapshotter.CSISnapshotter(node, NODE, Drivers(), recorder)
    binding = f"snapshots-{NODE}"
    async with admin(server) as c:
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(recorder.run())
                run = tg.create_task(snap.run())

                async def warned() -> list[dict]:
                    items = (await c.list("events", "default"))["items"]
                    return [e for e in items if e.get("reason") == "SnapshotterNotAuthorized"]
                events = await eventually(warned)
                ev = events[0]
                assert ev["type"] == "Warning"
                assert ev["involvedObject"]["kind"] == "Node" and ev["involvedObject"]["name"] == NODE
                msg = ev["message"]
                assert "are not served: its credential may not " in msg
                assert ".snapshot.storage.k8s.io" in msg
                assert "--snapshot-kubeconfig" in msg
                assert (f"kubectl create clusterrolebinding {binding} "
                        f"--clusterrole=snapshot-controller-runner --user=system:node:{NODE}") in msg
                assert not snap.snapshots.synced.is_set()  # nothing listed while refused
                # what the event says to do: then the loop starts
                await c.create("clusterrolebindings", {
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": binding},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                "name": "snapshot-controller-runner"},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                  "name": f"system:node:{NODE}"}]})

                async def started() -> bool:
                    return snap.snapshots.synced.is_set() and snap.contents.synced.is_set()
                await eventually(started)  # the snapshotter starts once bound
                assert len(await warned()) == 1  # said once
                run.cancel()
                raise asyncio.CancelledError
        except* asyncio.CancelledError:
            pass
        finally:
            try:
                await c.delete("clusterrolebindings", binding)
            except ClientError:
                pass
            await node.close()


async def test_the_snapshot_controllers_account_may_serve(server: ServerProcess) -> None:
    async with admin(server) as c:
        # the bootstrap policy binds kube-system/snapshot-controller (external-snapshotter's manifests make
        # the account, as `up` does)
        try:
            await c.create("serviceaccounts", {"apiVersion": "v1", "kind": "ServiceAccount",
                                               "metadata": {"name": "snapshot-controller"}}, "kube-system")
        except ClientError as e:
            if not e.already_exists:
                raise
        out = await c.create("serviceaccounts", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
            "kube-system", subresource="token", name="snapshot-controller")
    token = out["status"]["token"]
    async with Client(server.url, token, ca_file=str(server.ca_file)) as sa:
        snap = csisnapshotter.CSISnapshotter(sa, NODE, Drivers(), EventRecorder(sa, "kubelet", NODE))
        assert await snap.refused() is None
