"""--max-parallel-pod-starts: how many pods are in the node's part of their start at once, and that a pod
waiting on an image pull or a slow volume gives its slot to the others."""

import asyncio
import threading
from pathlib import Path

import pytest

from kernel.testing import RecordingSyscalls
from nodeagent.kubelet import kuberuntime
from nodeagent.kubelet.config import KubeletConfig
from nodeagent.kubelet.kuberuntime import PodRuntime
from nodeagent.kubelet.start_slots import StartSlots
from nodeagent.kubelet.volumes.manager import VolumeManager
from nodeagent.testing.clock import FakeClock
from nodeagent.testing.fake_cri import FakeRuntime, serve

IMG = "localhost/busybox:latest"
SLOW = "example.org/slow:1"


class Recorder:
    def record(self, obj, type_, reason, message):
        pass


def _pod(name, image=IMG):
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"containers": [{"name": f"{name}-c", "image": image,
                                     "imagePullPolicy": "IfNotPresent"}]},
            "status": {}}


class GatedVolumes(VolumeManager):
    """Volume set-up that blocks for the pods named in `gated` until `opened` is set (a hung mount)."""

    def __init__(self, *a, gated=(), **kw):
        super().__init__(*a, **kw)
        self.gated = set(gated)
        self.opened = threading.Event()
        self.entered = threading.Event()

    def setup_pod(self, pod):
        if pod["metadata"]["name"] in self.gated:
            self.entered.set()
            self.opened.wait(30)
        return super().setup_pod(pod)


@pytest.fixture
def runtime(tmp_path: Path):
    async def make(limit, gated=()):
        clock = FakeClock(1_700_000_000.0)
        cri = FakeRuntime(images=(IMG,), clock=clock)
        vm = GatedVolumes(tmp_path / "kubelet", sc=RecordingSyscalls(), gated=gated)
        return cri, vm, clock, StartSlots(limit)
    return make


def _rt(client, vm, clock, slots, tmp_path):
    return PodRuntime(client, vm, Recorder(), clock, log_root=tmp_path / "logs", cgroup_root=("inst",),
                      memory_capacity=8 << 30, runtime_name="fake", starts=slots)


def _starts(cri):
    return [(verb, what) for verb, what in cri.calls if verb in ("RunPodSandbox", "StartContainer")]


async def test_one_slot_runs_starts_one_pod_after_the_other(runtime, tmp_path):
    cri, vm, clock, slots = await runtime(1)
    async with serve(cri) as client:
        r = _rt(client, vm, clock, slots, tmp_path)
        await asyncio.gather(*(r.sync(_pod(n)) for n in ("a", "b", "c")))
    seq = _starts(cri)
    assert len(seq) == 6
    # each pod's sandbox is followed by its own container's start: no pod's start interleaves another's
    for i in range(0, 6, 2):
        assert seq[i][0] == "RunPodSandbox" and seq[i + 1] == ("StartContainer", f"{seq[i][1]}-c")


async def test_a_hung_image_pull_gives_its_slot_to_the_others(runtime, tmp_path):
    cri, vm, clock, slots = await runtime(1)
    cri.pull_gates[SLOW] = asyncio.Event()
    async with serve(cri) as client:
        r = _rt(client, vm, clock, slots, tmp_path)
        slow = asyncio.create_task(r.sync(_pod("slow", SLOW)))
        while ("PullImage", SLOW) not in cri.calls:  # noqa: ASYNC110 - the fake's record of the call
            await asyncio.sleep(0.01)
        assert not slots.holding("uid-slow")
        async with asyncio.timeout(10):  # behind one slot, yet not behind the pull
            await asyncio.gather(r.sync(_pod("a")), r.sync(_pod("b")))
        assert ("StartContainer", "a-c") in cri.calls and ("StartContainer", "b-c") in cri.calls
        assert not slow.done()
        cri.pull_gates[SLOW].set()
        await asyncio.wait_for(slow, 10)
    assert ("StartContainer", "slow-c") in cri.calls
    assert slots.waiting == 0


async def test_a_hung_volume_gives_its_slot_to_the_others(runtime, tmp_path, monkeypatch):
    monkeypatch.setattr(kuberuntime, "SLOW_VOLUME_SETUP", 0.05)
    cri, vm, clock, slots = await runtime(1, gated=("stuck",))
    async with serve(cri) as client:
        r = _rt(client, vm, clock, slots, tmp_path)
        stuck = asyncio.create_task(r.sync(_pod("stuck")))
        try:
            assert await asyncio.to_thread(vm.entered.wait, 10)  # its set-up began under the one slot
            async with asyncio.timeout(10):
                await asyncio.gather(r.sync(_pod("a")), r.sync(_pod("b")))
            assert ("StartContainer", "a-c") in cri.calls and ("StartContainer", "b-c") in cri.calls
            assert ("RunPodSandbox", "stuck") not in cri.calls and not stuck.done()
        finally:
            vm.opened.set()
        await asyncio.wait_for(stuck, 10)
    assert ("StartContainer", "stuck-c") in cri.calls


async def test_slots_are_first_come_first_served_and_released_blocks_give_them_back():
    slots = StartSlots(1)
    order = []
    waited = []

    async def start(uid):
        async with slots.slot(uid, lambda: waited.append(uid)):
            order.append(uid)
            await asyncio.sleep(0)

    await asyncio.gather(*(start(u) for u in "abcd"))
    assert order == list("abcd") and waited == list("bcd")

    async with slots.slot("x"):
        async with slots.slot("x"):  # re-entrant: a pod does not wait for itself
            assert slots.holding("x")
        other = asyncio.create_task(start("y"))
        await asyncio.sleep(0.01)
        assert not other.done() and slots.waiting == 1
        async with slots.released("x"):
            await asyncio.wait_for(other, 1)
        assert slots.holding("x")
    assert not slots.holding("x") and slots.waiting == 0


async def test_no_limit_never_waits():
    slots = StartSlots(0)
    inside: set[str] = set()
    most = 0

    async def start(uid):
        nonlocal most
        async with slots.slot(uid, lambda: pytest.fail("waited")):
            inside.add(uid)
            most = max(most, len(inside))
            await asyncio.sleep(0.01)
            inside.discard(uid)

    await asyncio.gather(*(start(str(i)) for i in range(20)))
    assert most == 20


def test_a_negative_limit_is_refused_with_the_flag_name():
    with pytest.raises(ValueError, match="--max-parallel-pod-starts -1: must not be negative"):
        StartSlots(-1)
    with pytest.raises(ValueError, match="--max-parallel-pod-starts -2"):
        KubeletConfig(data_dir="/d", node_name="n", runtime_endpoint="/s", credentials=None,  # type: ignore[arg-type]
                      root_dir="/r", log_dir="/l", manifests_dir="/m", max_parallel_pod_starts=-2)


def test_the_flag_reaches_up_and_agent_and_a_negative_one_is_refused(tmp_path):
    from tests.unit.test_configs import _agent, _up

    assert _up(tmp_path, "--max-parallel-pod-starts", "8").kubelet.max_parallel_pod_starts == 8
    assert _agent(tmp_path, "--max-parallel-pod-starts", "4").kubelet.max_parallel_pod_starts == 4
    assert _up(tmp_path).kubelet.max_parallel_pod_starts == 0  # kubelet's behaviour: no limit
    with pytest.raises(SystemExit, match="--max-parallel-pod-starts -1: must not be negative"):
        _up(tmp_path, "--max-parallel-pod-starts", "-1")
