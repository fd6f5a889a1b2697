"""The event half of the PLEG (kubelet's evented PLEG): follow the runtime's GetContainerEvents stream.

A container that stops or is removed wakes its pod's worker at once instead of at the next relist; the
relist keeps running every second (it still catches anything a broken stream missed). Runtimes without
the stream (containerd 1.6 answers UNIMPLEMENTED) leave the relist alone in charge.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from cri.proto import api_pb2 as pb
from nodeagent.kubelet.labels import POD_UID_LABEL

log = logging.getLogger("nodeagent.kubelet.events")

# Started/created events follow our own Start/CreateContainer calls, whose sync writes the status anyway.
WAKING = (pb.CONTAINER_STOPPED_EVENT, pb.CONTAINER_DELETED_EVENT)


def pod_uid(ev: pb.ContainerEventResponse) -> str:
    st = ev.pod_sandbox_status
    return st.labels.get(POD_UID_LABEL) or st.metadata.uid


async def follow(stream: Callable[[], AsyncIterator[pb.ContainerEventResponse]], poke: Callable[[str], None],
                 sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
                 max_delay: float = 30.0) -> None:
    """Poke the pod of every stop/remove event until cancelled; reconnect (with back-off) when the stream
    breaks; return when the runtime does not implement it."""
    delay = 0.5
    while True:
        try:
            async for ev in stream():
                delay = 0.5
                if ev.container_event_type in WAKING:
                    uid = pod_uid(ev)
                    if uid:
                        poke(uid)
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                log.info("the runtime has no container event stream; relisting only")
                return
            log.info("container event stream broke (%s); reconnecting in %.1f s", e.code().name, delay)
        except Exception as e:  # never take the kubelet down: the relist still covers everything
            log.warning("container event stream failed: %s; reconnecting in %.1f s", e, delay)
        await sleep(delay)  # a stream that ended (runtime restarted) or failed
        delay = min(delay * 2, max_delay)
