"""The kubelet's status manager: statuses set by the pod workers, written by its own loop, one PATCH per
pod per change (coalesced, skipped when the API has it, one in flight per pod, retried on failure)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from nodeagent.client.rest import ClientError
from nodeagent.kubelet.status_manager import StatusManager
from nodeagent.testing.clock import FakeClock


def _pod(name: str = "p", uid: str = "u1", status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid}, "status": status or {}}


class _API:
    """Records status PATCHes; `gate` holds each write until set; `fail` answers the next writes with
    these errors."""

    def __init__(self) -> None:
        self.patches: list[tuple[str, str | None, dict[str, Any]]] = []
        self.pods: dict[str, dict[str, Any]] = {}
        self.gate: asyncio.Event | None = None
        self.fail: list[ClientError] = []
        self.in_flight = 0
        self.most_in_flight = 0

    def current(self, name: str, namespace: str | None) -> dict[str, Any] | None:
        return self.pods.get(name)

    async def patch(self, resource: str, name: str, body: dict[str, Any], namespace: str | None = None,
                    subresource: str = "") -> dict[str, Any]:
        assert (resource, subresource) == ("pods", "status")
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.gate is not None:
                await self.gate.wait()
            if self.fail:
                raise self.fail.pop(0)
            self.patches.append((name, namespace, body["status"]))
            return {}
        finally:
            self.in_flight -= 1


@contextlib.asynccontextmanager
async def _running(api: _API, clock: FakeClock | None = None):
    sm = StatusManager(api, api.current, clock or FakeClock())  # type: ignore[arg-type]
    task = asyncio.create_task(sm.run())
    try:
        yield sm
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_changes_before_the_write_become_one_patch_with_the_newest():
    api = _API()
    async with _running(api) as sm:
        pod = _pod()
        sm.set(pod, {"phase": "Pending"})
        sm.set(pod, {"phase": "Running"})
        await _settle()
        assert api.patches == [("p", "ns", {"phase": "Running"})]
        assert sm.get("u1") == {"phase": "Running"}


async def test_an_unchanged_status_is_not_written_again():
    api = _API()
    async with _running(api) as sm:
        pod = _pod()
        sm.set(pod, {"phase": "Running"})
        await _settle()
        sm.set(pod, {"phase": "Running"})
        await _settle()
        assert len(api.patches) == 1 and sm.writes == 1


async def test_a_status_the_api_already_holds_is_not_written():
    api = _API()
    api.pods["p"] = _pod(status={"phase": "Running"})
    async with _running(api) as sm:
        sm.set(_pod(), {"phase": "Running"})
        await _settle()
        assert api.patches == []
        sm.set(_pod(), {"phase": "Failed"})
        await _settle()
        assert api.patches == [("p", "ns", {"phase": "Failed"})]


async def test_one_write_per_pod_in_flight_and_the_newest_follows():
    api = _API()
    api.gate = asyncio.Event()
    async with _running(api) as sm:
        sm.set(_pod(), {"phase": "Pending"})
        await _settle()
        sm.set(_pod(), {"phase": "Running"})
        await _settle()
        assert api.in_flight == 1
        api.gate.set()
        await _settle()
        assert [s["phase"] for _, _, s in api.patches] == ["Pending", "Running"]
        assert api.most_in_flight == 1


async def test_the_status_set_back_during_a_write_is_written_after_it():
    """A, then B in flight, then A again: the API must end with A though A was the last written before."""
    api = _API()
    async with _running(api) as sm:
        sm.set(_pod(), {"phase": "Pending"})
        await _settle()
        api.gate = asyncio.Event()
        sm.set(_pod(), {"phase": "Running"})
        await _settle()
        sm.set(_pod(), {"phase": "Pending"})
        api.gate.set()
        await _settle()
        assert [s["phase"] for _, _, s in api.patches] == ["Pending", "Running", "Pending"]


async def test_pods_are_written_side_by_side():
    api = _API()
    api.gate = asyncio.Event()
    async with _running(api) as sm:
        for i in range(5):
            sm.set(_pod(f"p{i}", f"u{i}"), {"phase": "Running"})
        await _settle()
        assert api.in_flight == 5
        api.gate.set()
        await _settle()
        assert sorted(n for n, _, _ in api.patches) == [f"p{i}" for i in range(5)]


async def test_a_failed_write_is_retried_with_the_newest_status():
    api = _API()
    clock = FakeClock()
    api.fail = [ClientError(500, "InternalError", "boom")]
    async with _running(api, clock) as sm:
        sm.set(_pod(), {"phase": "Pending"})
        await _settle()
        assert api.patches == []
        sm.set(_pod(), {"phase": "Running"})
        clock.advance(1.0)
        await _settle()
        assert api.patches == [("p", "ns", {"phase": "Running"})]


async def test_a_pod_gone_or_replaced_is_not_written():
    api = _API()
    async with _running(api) as sm:
        api.fail = [ClientError(404, "NotFound", "gone")]
        sm.set(_pod(), {"phase": "Running"})
        await _settle()
        assert api.patches == [] and api.fail == []
        api.pods["q"] = _pod("q", "other-uid")
        sm.set(_pod("q", "u2"), {"phase": "Running"})
        await _settle()
        assert api.patches == []


async def test_a_static_pods_status_goes_to_its_mirror():
    api = _API()
    api.pods["s"] = _pod("s", "mirror-uid")
    async with _running(api) as sm:
        sm.set(_pod("s", "static-uid"), {"phase": "Running"}, mirror=True)
        await _settle()
        assert api.patches == [("s", "ns", {"phase": "Running"})]


async def test_forget_drops_what_was_not_written():
    api = _API()
    api.gate = asyncio.Event()
    async with _running(api) as sm:
        sm.set(_pod(), {"phase": "Pending"})
        await _settle()
        sm.set(_pod(), {"phase": "Running"})
        sm.forget("u1")
        api.gate.set()
        await _settle()
        assert [s["phase"] for _, _, s in api.patches] == ["Pending"]
        assert sm.get("u1") is None and sm.pending() == 0


def test_the_next_status_builds_on_the_kubelets_own_last_one():
    """kubelet's generateAPIPodStatus reads the status manager's status, not the API's (which may not show
    the last write yet), but others' conditions come from the API and a terminal API phase stays."""
    from nodeagent.kubelet.agent import _with_own_status

    own = {"phase": "Running", "startTime": "t0",
           "conditions": [{"type": "Ready", "status": "True"}, {"type": "DisruptionTarget", "status": "x"}]}
    api = _pod(status={"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"},
                                                          {"type": "example.com/gate", "status": "True"}]})
    assert _with_own_status(api, None) is api
    base = _with_own_status(api, own)
    assert base["status"]["phase"] == "Running" and base["status"]["startTime"] == "t0"
    assert base["status"]["conditions"] == [{"type": "Ready", "status": "True"},
                                            {"type": "example.com/gate", "status": "True"}]
    failed = _pod(status={"phase": "Failed"})
    assert _with_own_status(failed, own) is failed
