"""The runtime's /dev/shm mounts against cancels and half-made state on the real kernel: a RunPodSandbox
cancelled while its shm mount is being made (a client past its deadline, the daemon stopping), and a
sandbox directory a crash left half-made with its shm mounted. Each must leave no mount, directory,
process or cgroup behind."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest

import cri.runtime.sandboxes as sandboxes
from cri.client import sandbox_config
from cri.runtime.service import Runtime, RuntimeOptions
from cri.runtime.state import RecordFile
from kernel import syscalls as sc
from kernel.cgroups import detect
from kernel.mounts import is_mountpoint, mounts_under
from tests.harness.resources import unique

pytestmark = pytest.mark.root


@pytest.fixture
async def runtime(res):
    """Our runtime in this process without a CNI config, its state on a fresh directory: the sandboxes share
    the node's network (a pod-network one is refused without a CNI config, as containerd's) and keep their
    own IPC namespace, so each still gets its /dev/shm mount."""
    rt = Runtime(RuntimeOptions(state_dir=res.mountpoint()), detect())
    await rt.start()
    try:
        yield rt
    finally:
        for s in list(rt.sandboxes):
            with contextlib.suppress(Exception):
                await rt.remove_pod_sandbox(s)
        await rt.close()


def _config(res, name: str | None = None):
    return sandbox_config(name or unique("pod"), cgroup_parent="/" + res.cgroup_name(), host_network=True)


class _HeldShmMount:
    """The kernel's syscalls as the sandbox code calls them, but the shm mount is made only once `release`
    is set (its directory already made); `entered` is set when a create reaches it."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()

    def __getattr__(self, name: str):
        return getattr(sc, name)

    def mount(self, source: str, target: str, *args, **kw) -> None:
        if target.endswith("/shm"):
            self.entered.set()
            self.release.wait(30)
        sc.mount(source, target, *args, **kw)


async def test_create_cancelled_during_its_shm_mount_leaves_nothing(runtime, res, monkeypatch):
    """The cancel lands while the shm mount waits in its worker thread and the sandbox's record file is
    still being made on another (a busy disk): the create's cleanup must not run its unmount before the
    mount exists and then remove the directory around it."""
    held = _HeldShmMount()
    monkeypatch.setattr(sandboxes, "sc", held)
    record_made = threading.Event()
    real_make = RecordFile.make

    def slow_make(self, *args, **kw):
        record_made.wait(30)
        return real_make(self, *args, **kw)

    monkeypatch.setattr(RecordFile, "make", slow_make)
    cfg = _config(res)
    create = asyncio.create_task(runtime.run_pod_sandbox(cfg, ""))
    assert await asyncio.to_thread(held.entered.wait, 30)
    create.cancel()
    await asyncio.sleep(0.2)  # the cancel reached the create while its mount is still to come
    held.release.set()  # the worker thread mounts now, after the cancel
    await asyncio.sleep(0.2)
    record_made.set()
    with pytest.raises(asyncio.CancelledError):
        await create
    state = runtime.opts.state_dir
    assert mounts_under(state / "sandboxes") == []
    assert list((state / "sandboxes").iterdir()) == []
    assert runtime.list_sandboxes(None) == []
    # the name is free again: the kubelet's retry makes the sandbox, and its removal leaves nothing either
    monkeypatch.undo()
    sid = await runtime.run_pod_sandbox(cfg, "")
    shm = state / "sandboxes" / sid / "shm"
    assert is_mountpoint(shm)
    await runtime.remove_pod_sandbox(sid)
    assert mounts_under(state / "sandboxes") == []
    assert not (state / "sandboxes" / sid).exists()


async def test_restart_removes_a_half_made_sandbox_with_its_shm(res):
    """A crash between the shm mount and the sandbox's record: at the next start the directory is removed
    with its mount (the sandbox was never reported)."""
    state = res.mountpoint()
    Runtime(RuntimeOptions(state_dir=state), detect())  # lays out the state directory
    half = state / "sandboxes" / ("0" * 64)
    half.mkdir()
    sandboxes._mount_shm(half / "shm")
    assert is_mountpoint(half / "shm")
    rt = Runtime(RuntimeOptions(state_dir=state), detect())
    await rt.start()
    try:
        assert mounts_under(state / "sandboxes") == []
        assert not half.exists()
        assert rt.list_sandboxes(None) == []
    finally:
        await rt.close()
