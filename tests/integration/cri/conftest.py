"""Fixtures for the runtime's integration tests: a `nodeagent cri` daemon with the test images."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest

from cri.client import container_config, sandbox_config
from cri.proto import api_pb2 as pb
from tests.harness.resources import remove_cgroup, unique
from tests.integration.cri.daemon import CRIDaemon, mounts_under

pytestmark = pytest.mark.root

BUSYBOX = "localhost/busybox:latest"
CONFIGURED = "localhost/configured:v1"


@pytest.fixture(scope="module")
def cri(tmp_path_factory, images):
    d = CRIDaemon(tmp_path_factory.mktemp("cri"))
    d.import_images([images.busybox.docker_archive, images.configured.docker_archive])
    d.start()
    try:
        yield d
    finally:
        d.remove_everything()
        d.stop()
        d.close()
        leftover = mounts_under(d.root)
        assert not leftover, f"mounts left behind: {leftover}"


class Pods:
    """Makes sandboxes with a unique cgroup parent; removes them and checks the cgroups are gone."""

    def __init__(self, d: CRIDaemon, tmp: Path) -> None:
        assert d.client is not None, "the runtime is started"
        self.d = d
        self.c = d.client
        self.tmp = tmp
        self.parents: list[str] = []
        self.ids: list[str] = []

    def config(self, name: str | None = None, **kw) -> pb.PodSandboxConfig:
        parent = "/" + unique("cg")
        self.parents.append(parent)
        kw.setdefault("log_dir", str(self.tmp / "logs"))
        return sandbox_config(name or unique("pod"), cgroup_parent=parent, **kw)

    def run(self, cfg: pb.PodSandboxConfig | None = None, **kw) -> tuple[str, pb.PodSandboxConfig]:
        cfg = cfg or self.config(**kw)
        sid = self.c.run_pod_sandbox(cfg)
        self.ids.append(sid)
        return sid, cfg

    def container(self, sid: str, scfg: pb.PodSandboxConfig, command: list[str], name: str = "c",
                  image: str = BUSYBOX, start: bool = True, **kw) -> str:
        cfg = container_config(name, image, command, log_path=f"{name}/0.log", **kw)
        cid = self.c.create_container(sid, cfg, scfg)
        if start:
            self.c.start_container(cid)
        return cid

    def info(self, cid: str) -> dict:
        return json.loads(self.c.container_status(cid, verbose=True).info["info"])

    def close(self) -> None:
        for sid in self.ids:
            if self.d.client is not None:
                try:
                    self.d.client.stop_pod_sandbox(sid)
                    self.d.client.remove_pod_sandbox(sid)
                except grpc.RpcError as e:
                    # containerd 1.6 answers NOT_FOUND for an already removed sandbox (ours: OK)
                    if e.code() != grpc.StatusCode.NOT_FOUND:
                        raise
        for parent in self.parents:
            from kernel.cgroups import detect_cgroups

            info = detect_cgroups()
            if info.version == "v1":
                roots = set(info.v1_controllers.values())
            else:
                assert info.v2_root is not None
                roots = {info.v2_root}
            left = [r + parent for r in roots if Path(r + parent).exists()]
            for p in left:
                remove_cgroup(Path(p))
            assert not left, f"cgroups left behind: {left}"


@pytest.fixture
def pods(cri, tmp_path):
    p = Pods(cri, tmp_path)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def own(tmp_path, images):
    """A daemon of the test's own (it may be killed and restarted), with busybox, and its Pods helper."""
    d = CRIDaemon(tmp_path / "cri")
    d.import_images([images.busybox.docker_archive])
    d.start()
    pods = Pods(d, tmp_path)
    try:
        yield d, pods
    finally:
        pods.c = d.client if d.client is not None else d.start()
        pods.close()
        d.remove_everything()
        d.stop()
        d.close()
