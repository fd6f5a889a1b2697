"""An in-memory CRI runtime with the kubelet's `RuntimeClient` surface, for unit tests of pod syncs.

Sandboxes and containers are plain pb messages; `exit(cid, code)` makes a running container exit, and
`calls` records every verb in order, so tests assert what a sync asked the runtime to do.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import grpc

from cri.proto import api_pb2 as pb


class _NotFound(grpc.aio.AioRpcError):
    def __init__(self, what: str) -> None:
        super().__init__(grpc.StatusCode.NOT_FOUND, grpc.aio.Metadata(), grpc.aio.Metadata(), details=f"{what} not found")


class FakeCRI:
    def __init__(self, images: tuple[str, ...] = (), clock: Any = None) -> None:
        self.clock = clock  # timestamps follow the test's clock (a FakeClock), else the wall clock
        self.sandboxes: dict[str, pb.PodSandbox] = {}
        self.sandbox_configs: dict[str, pb.PodSandboxConfig] = {}
        self.containers: dict[str, pb.ContainerStatus] = {}
        self.container_sandbox: dict[str, str] = {}
        self.images = set(images)
        self.calls: list[tuple[str, Any]] = []
        self.fail_start: set[str] = set()  # container names whose start fails
        self.exec_results: dict[tuple[str, ...], int] = {}  # command → exit code (default 0)
        self.unpullable: set[str] = set()
        self._ids = itertools.count(1)
        self._ip = itertools.count(2)

    def _now(self) -> int:
        return int(self.clock.now() * 1e9) if self.clock is not None else time.time_ns()

    async def list_sandboxes(self, pod_uid: str | None = None) -> list[pb.PodSandbox]:
        return [s for s in self.sandboxes.values() if not pod_uid or s.labels.get("io.kubernetes.pod.uid") == pod_uid]

    async def list_containers(self, pod_uid: str | None = None) -> list[pb.Container]:
        out = []
        for st in self.containers.values():
            if pod_uid and st.labels.get("io.kubernetes.pod.uid") != pod_uid:
                continue
            out.append(pb.Container(id=st.id, pod_sandbox_id=self.container_sandbox[st.id], metadata=st.metadata,
                                    state=st.state, labels=st.labels, annotations=st.annotations))
        return out

    async def container_status(self, cid: str) -> pb.ContainerStatus:
        if cid not in self.containers:
            raise _NotFound(cid)
        return self.containers[cid]

    async def sandbox_status(self, sid: str) -> pb.PodSandboxStatus:
        s = self.sandboxes[sid]
        st = pb.PodSandboxStatus(id=sid, state=s.state, metadata=s.metadata, labels=s.labels)
        st.network.ip = s.annotations.get("ip", "")
        return st

    async def run_sandbox(self, config: pb.PodSandboxConfig) -> str:
        sid = f"sb{next(self._ids)}"
        self.calls.append(("RunPodSandbox", config.metadata.name))
        s = pb.PodSandbox(id=sid, metadata=config.metadata, state=pb.SANDBOX_READY, created_at=self._now(),
                          labels=config.labels)
        s.annotations["ip"] = f"10.0.0.{next(self._ip)}"
        self.sandboxes[sid] = s
        self.sandbox_configs[sid] = config
        return sid

    async def stop_sandbox(self, sid: str) -> None:
        if sid not in self.sandboxes:
            raise _NotFound(sid)
        self.calls.append(("StopPodSandbox", sid))
        for cid, owner in self.container_sandbox.items():
            if owner == sid and self.containers[cid].state == pb.CONTAINER_RUNNING:
                self.exit(cid, 137)
        self.sandboxes[sid].state = pb.SANDBOX_NOTREADY

    async def remove_sandbox(self, sid: str) -> None:
        if sid not in self.sandboxes:
            raise _NotFound(sid)
        self.calls.append(("RemovePodSandbox", sid))
        del self.sandboxes[sid]
        for cid in [c for c, owner in self.container_sandbox.items() if owner == sid]:
            del self.containers[cid]
            del self.container_sandbox[cid]

    async def create_container(self, sid: str, config: pb.ContainerConfig, sandbox_config: pb.PodSandboxConfig) -> str:
        cid = f"c{next(self._ids)}"
        self.calls.append(("CreateContainer", config.metadata.name))
        self.containers[cid] = pb.ContainerStatus(id=cid, metadata=config.metadata, state=pb.CONTAINER_CREATED,
                                                  created_at=self._now(), image=config.image, labels=config.labels,
                                                  annotations=config.annotations)
        self.container_sandbox[cid] = sid
        self.last_config = config
        return cid

    async def start_container(self, cid: str) -> None:
        st = self.containers[cid]
        self.calls.append(("StartContainer", st.metadata.name))
        if st.metadata.name in self.fail_start:
            raise RuntimeError("container process did not start")
        st.state = pb.CONTAINER_RUNNING
        st.started_at = self._now()

    def exit(self, cid: str, code: int) -> None:
        st = self.containers[cid]
        st.state = pb.CONTAINER_EXITED
        st.exit_code = code
        st.finished_at = self._now()
        st.reason = "Completed" if code == 0 else "Error"

    async def stop_container(self, cid: str, grace: int) -> None:
        if cid not in self.containers:
            raise _NotFound(cid)
        self.calls.append(("StopContainer", (self.containers[cid].metadata.name, grace)))
        if self.containers[cid].state == pb.CONTAINER_RUNNING:
            self.exit(cid, 143)

    async def remove_container(self, cid: str) -> None:
        if cid not in self.containers:
            raise _NotFound(cid)
        self.calls.append(("RemoveContainer", self.containers[cid].metadata.name))
        del self.containers[cid]
        del self.container_sandbox[cid]

    async def exec_sync(self, cid: str, cmd: list[str], seconds: int = 0) -> pb.ExecSyncResponse:
        self.calls.append(("ExecSync", (self.containers[cid].metadata.name, tuple(cmd))))
        code = self.exec_results.get(tuple(cmd), 0)
        return pb.ExecSyncResponse(exit_code=code, stdout=b"", stderr=b"failed" if code else b"")

    async def image_present(self, image: str) -> pb.Image | None:
        return pb.Image(id=f"sha256:{image}", size=1) if image in self.images else None

    async def pull_image(self, image: str) -> str:
        self.calls.append(("PullImage", image))
        if image in self.unpullable:
            raise RuntimeError(f"failed to resolve reference {image!r}: not found")
        self.images.add(image)
        return f"sha256:{image}"

    def running(self, name: str) -> list[str]:
        return [c for c, st in self.containers.items() if st.metadata.name == name and st.state == pb.CONTAINER_RUNNING]
