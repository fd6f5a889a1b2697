"""CRI image volumes (Mount.image, KEP-4639) on our runtime: an image's file system mounted read-only in a
container, whole or by image_sub_path, reported by digest in ContainerStatus; a mount that cannot be
honoured is INVALID_ARGUMENT and leaves nothing mounted or made; the overlay goes with the container."""

from __future__ import annotations

import grpc
import pytest

from cri.client import container_config
from cri.proto import api_pb2 as pb
from kernel.mounts import mountinfo
from tests.integration.cri.conftest import BUSYBOX, CONFIGURED

pytestmark = pytest.mark.root


def _image_mounts(cri) -> list[str]:
    return [m.point for m in mountinfo()
            if m.point.startswith(str(cri.root)) and "/image-mounts/" in m.point]


def _config(name: str, *mounts: pb.Mount) -> pb.ContainerConfig:
    cfg = container_config(name, BUSYBOX, ["sleep", "300"])
    cfg.mounts.extend(mounts)
    return cfg


def _image_mount(path: str, sub: str = "", image: str = CONFIGURED) -> pb.Mount:
    return pb.Mount(container_path=path, image=pb.ImageSpec(image=image), image_sub_path=sub, readonly=True)


def test_image_volume_whole_and_sub_path(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    cid = c.create_container(sid, _config("img", _image_mount("/img"), _image_mount("/data", "work")), scfg)
    c.start_container(cid)
    got = c.exec_sync(cid, ["cat", "/img/work/data.txt", "/data/data.txt"])
    assert got.exit_code == 0 and got.stdout == b"layer two\nlayer two\n", got
    assert c.exec_sync(cid, ["ls", "/img/bin/busybox"]).exit_code == 0  # the lower layer is there too
    wrote = c.exec_sync(cid, ["sh", "-c", "echo x > /img/new; echo x > /data/new"])
    assert wrote.exit_code != 0 and b"Read-only file system" in wrote.stderr, wrote
    status = c.container_status(cid).status
    image = c.image_status(CONFIGURED).image
    want = image.repo_digests[0] if image.repo_digests else image.id
    assert [(m.container_path, m.image.image, m.image_sub_path, m.readonly) for m in status.mounts] == [
        ("/img", want, "", True), ("/data", want, "work", True)]
    # the image's layers are the volume's: it may not be removed while the container exists
    with pytest.raises(grpc.RpcError) as e:
        c.remove_image(CONFIGURED)
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION, e.value.details()
    assert len(_image_mounts(cri)) == 2
    c.stop_container(cid, 0)
    c.remove_container(cid)
    assert _image_mounts(cri) == []


@pytest.mark.parametrize("mount, why", [
    (_image_mount("/img", "nope"), "does not exist in the image"),
    (_image_mount("/img", "../etc"), "must be a relative path"),
    (_image_mount("/img", "/etc"), "must be a relative path"),
    (_image_mount("/img", image="localhost/absent:v9"), "is not present"),
    (pb.Mount(container_path="/img", host_path="/tmp", image=pb.ImageSpec(image=CONFIGURED)), "exclusive"),
    (pb.Mount(container_path="/img", host_path="/tmp", image_sub_path="x"), "set without image"),
    (_image_mount("img"), "must be absolute"),
])
def test_a_mount_that_cannot_be_honoured_is_refused_and_leaves_nothing(cri, pods, mount, why):
    c = cri.client
    sid, scfg = pods.run()
    before = {x.id for x in c.list_containers()}
    containers = sorted(p.name for p in (cri.state / "containers").iterdir())
    with pytest.raises(grpc.RpcError) as e:
        c.create_container(sid, _config("bad", _image_mount("/fine"), mount), scfg)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT, e.value.details()
    assert why in (e.value.details() or "")
    assert {x.id for x in c.list_containers()} == before
    assert _image_mounts(cri) == []
    assert sorted(p.name for p in (cri.state / "containers").iterdir()) == containers
