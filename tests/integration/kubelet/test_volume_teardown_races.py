"""A pod's volumes against its worker's timing on the real kernel: the projected service-account volume
(kube-api-access-*, a tmpfs) of a pod deleted while its setup is still waiting for the token, and of a
deleted pod whose teardown is queued for a worker thread when the kubelet stops. No mount and no pod
directory may outlive the pod. The runtime is the fake CRI server: what is under test is the kubelet's
own mounts."""

from __future__ import annotations

import asyncio
import functools
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from kernel.mounts import is_mountpoint, mounts_under, unmount
from nodeagent.kubelet.kuberuntime import PodRuntime
from nodeagent.kubelet.volumes.manager import VolumeManager
from nodeagent.kubelet.workers import Phase, PodWorkers
from nodeagent.testing.clock import FakeClock
from nodeagent.testing.fake_cri import FakeRuntime, serve

pytestmark = pytest.mark.root

IMG = "localhost/busybox:latest"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


class _Events:
    def record(self, obj: Any, type_: str, reason: str, message: str) -> None:
        pass


def _pod(uid: str) -> dict:
    """A pod with the projected volume every pod of a service account gets (token + namespace)."""
    return {"metadata": {"name": f"p-{uid}", "namespace": "default", "uid": uid},
            "spec": {"containers": [{"name": "c", "image": IMG, "imagePullPolicy": "IfNotPresent",
                                     "volumeMounts": [{"name": "kube-api-access-x", "mountPath": SA_DIR,
                                                       "readOnly": True}]}],
                     "volumes": [{"name": "kube-api-access-x", "projected": {"defaultMode": 420, "sources": [
                         {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                         {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                             "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}}]},
            "status": {}}


class _HeldToken:
    """The token getter the projected volume calls from its worker thread, held until `release`."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self, pod: Any, audience: str, expiration: int) -> str:
        self.entered.set()
        self.release.wait(30)
        return "header.payload.signature"


class _Node:
    def __init__(self, root: Path, cri: FakeRuntime, client: Any, token: Any) -> None:
        clock = FakeClock(1_700_000_000.0)
        self.root, self.cri = root, cri
        self.volumes = VolumeManager(root, get_token=token)
        self.runtime = PodRuntime(client, self.volumes, _Events(), clock, log_root=root / "logs",
                                  cgroup_root=("inst",), memory_capacity=8 << 30, runtime_name="fake")

    def workers(self, tg: asyncio.TaskGroup) -> PodWorkers:
        async def terminate(pod: dict) -> None:
            await self.runtime.kill(pod, 0)

        async def sync(pod: dict) -> float | None:
            await self.runtime.sync(pod)
            return None

        return PodWorkers(tg, sync, terminate, resync=3600)

    def volume_dir(self, uid: str) -> Path:
        return self.volumes.volume_dir(uid, "projected", "kube-api-access-x")


@pytest.fixture
async def node(res):
    root = res.mountpoint()
    cri = FakeRuntime(images=(IMG,), clock=FakeClock(1_700_000_000.0))
    token = _HeldToken()
    async with serve(cri) as client:
        yield _Node(root, cri, client, token), token
    for point in mounts_under(root):  # a failed test's mounts: the host is left as found
        unmount(point)


async def _until(cond, within: float = 30) -> None:
    end = asyncio.get_running_loop().time() + within
    while not cond():
        assert asyncio.get_running_loop().time() < end, "timed out"
        await asyncio.sleep(0.02)


async def test_pod_deleted_while_its_projected_volume_waits_for_the_token(node):
    n, token = node
    pod = _pod("held-1")
    async with asyncio.TaskGroup() as tg:
        workers = n.workers(tg)
        workers.update(pod)
        assert await asyncio.to_thread(token.entered.wait, 30)
        workers.remove(pod)  # deleted for good (force-deleted: gone from the API at once)
        await asyncio.sleep(0.1)
        token.release.set()  # the setup goes on: the tmpfs is mounted after the deletion
        await _until(lambda: "held-1" in workers.finished)
    assert mounts_under(n.root) == []
    assert not n.volumes.pod_dir("held-1").exists()
    assert n.cri.sandboxes == {}


class _RecordingExecutor(ThreadPoolExecutor):
    """One worker thread (a busy node's pool), recording what is handed to it."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.submitted: list[Any] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future:
        self.submitted.append(fn)
        return super().submit(fn, *args, **kwargs)

    def handed(self, call: Any) -> bool:
        return any(isinstance(f, functools.partial) and call in f.args for f in self.submitted)


async def test_teardown_queued_when_the_kubelet_stops_still_unmounts(node):
    """The pod is gone from the runtime, its volume teardown waits for a busy worker thread, and the kubelet
    stops (its workers cancelled): the teardown handed over still runs; a cancel does not drop it."""
    n, token = node
    token.release.set()
    loop = asyncio.get_running_loop()
    pool = _RecordingExecutor()
    loop.set_default_executor(pool)
    pod = _pod("held-2")
    busy = threading.Event()
    try:
        async with asyncio.TaskGroup() as tg:
            workers = n.workers(tg)
            workers.update(pod)
            await _until(lambda: any(c[0] == "StartContainer" for c in n.cri.calls))
            assert is_mountpoint(n.volume_dir("held-2"))
            blocker = loop.run_in_executor(None, busy.wait, 30)  # the only thread is busy elsewhere
            workers.remove(pod)
            await _until(lambda: pool.handed(n.volumes.teardown_pod))
            assert workers.phase("held-2") == Phase.TERMINATING
            assert n.cri.sandboxes == {}
            await workers.stop()  # the kubelet stops now
            busy.set()
            await blocker
        assert mounts_under(n.root) == []
        assert not n.volumes.pod_dir("held-2").exists()
    finally:
        busy.set()
        pool.shutdown(wait=True)
