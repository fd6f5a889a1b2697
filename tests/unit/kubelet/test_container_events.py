"""The evented half of the PLEG: stop/remove events wake their pod; UNIMPLEMENTED leaves relisting alone."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from cri.proto import api_pb2 as pb
from nodeagent.kubelet import container_events
from nodeagent.kubelet.labels import POD_UID_LABEL


def _ev(kind: pb.ContainerEventType, uid: str) -> pb.ContainerEventResponse:
    ev = pb.ContainerEventResponse(container_id="c", container_event_type=kind)
    ev.pod_sandbox_status.labels[POD_UID_LABEL] = uid
    return ev


class _Err(grpc.aio.AioRpcError):
    def __init__(self, code):
        super().__init__(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details="x", debug_error_string=None)


def test_stop_and_delete_events_wake_their_pod_and_a_broken_stream_is_reopened():
    pokes: list[str] = []
    sleeps: list[float] = []
    calls: list[int] = []

    def stream():
        calls.append(1)

        async def gen():
            if len(calls) == 1:
                for ev in (_ev(pb.CONTAINER_STARTED_EVENT, "a"), _ev(pb.CONTAINER_STOPPED_EVENT, "a"),
                           _ev(pb.CONTAINER_DELETED_EVENT, "b"), _ev(pb.CONTAINER_CREATED_EVENT, "c")):
                    yield ev
                raise _Err(grpc.StatusCode.UNAVAILABLE)
            if len(calls) == 2:
                yield _ev(pb.CONTAINER_STOPPED_EVENT, "d")
                return  # the runtime restarted: the stream just ends
            raise _Err(grpc.StatusCode.UNIMPLEMENTED)
        return gen()

    async def sleep(s):
        sleeps.append(s)

    asyncio.run(container_events.follow(stream, pokes.append, sleep))
    assert pokes == ["a", "b", "d"]
    assert len(calls) == 3 and sleeps == [0.5, 0.5]


def test_a_runtime_without_the_stream_is_left_to_the_relist():
    def stream():
        async def gen():
            raise _Err(grpc.StatusCode.UNIMPLEMENTED)
            yield  # pragma: no cover
        return gen()

    async def sleep(s):
        pytest.fail("no retry against a runtime that does not implement the stream")

    asyncio.run(container_events.follow(stream, lambda uid: None, sleep))


def test_the_uid_falls_back_to_the_sandbox_metadata():
    ev = pb.ContainerEventResponse(container_event_type=pb.CONTAINER_STOPPED_EVENT)
    ev.pod_sandbox_status.metadata.uid = "u1"
    assert container_events.pod_uid(ev) == "u1"
