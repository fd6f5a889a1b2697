"""ImageService over the socket: status/list/remove/fs-info of imported images, and PullImage from a
local registry (Debian's docker-registry on 127.0.0.1), then a container from the pulled image."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc
import pytest

from cri.client import container_config
from cri.proto import api_pb2 as pb
from tests.integration.cri.conftest import BUSYBOX

pytestmark = pytest.mark.root


def spec(ref: str) -> pb.ImageSpec:
    return pb.ImageSpec(image=ref)


def test_status_list_fsinfo(cri, images):
    c = cri.client
    st = c.img.ImageStatus(pb.ImageStatusRequest(image=spec(BUSYBOX), verbose=True))
    assert st.image.id == images.busybox.image_id
    assert BUSYBOX in st.image.repo_tags and st.image.size > 0
    assert "config" in st.info["info"]
    by_id = c.img.ImageStatus(pb.ImageStatusRequest(image=spec(images.busybox.image_id)))
    assert by_id.image.id == st.image.id
    missing = c.img.ImageStatus(pb.ImageStatusRequest(image=spec("localhost/nothing:here")))
    assert not missing.HasField("image")
    ids = {i.id for i in c.img.ListImages(pb.ListImagesRequest()).images}
    assert images.busybox.image_id in ids
    fs = c.img.ImageFsInfo(pb.ImageFsInfoRequest()).image_filesystems
    assert fs and fs[0].used_bytes.value > 0 and fs[0].fs_id.mountpoint
    with pytest.raises(grpc.RpcError) as e:
        c.img.ImageStatus(pb.ImageStatusRequest(image=spec("")))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_pull_run_and_remove(cri, pods, images, tmp_path):
    from tests.integration.images.registry import REGISTRY_BIN, Registry

    if not Path(REGISTRY_BIN).exists() or not shutil.which("skopeo"):
        pytest.skip("docker-registry and skopeo are needed (make install adds them)")
    reg = Registry(tmp_path / "registry")
    try:
        reg.push(images.busybox.oci_dir, "latest", "pulled/busybox", "v1")
        ref = f"{reg.host}/pulled/busybox:v1"
        c = cri.client
        image_ref = c.img.PullImage(pb.PullImageRequest(image=spec(ref))).image_ref
        assert image_ref == images.busybox.image_id
        st = c.img.ImageStatus(pb.ImageStatusRequest(image=spec(ref))).image
        assert ref in st.repo_tags
        sid, scfg = pods.run()
        cid = c.create(sid, container_config("pulled", ref, ["sh", "-c", "echo from-pull"], log_path="p/0.log"), scfg)
        c.start(cid)
        done = c.wait_state(cid, pb.CONTAINER_EXITED)
        assert done.exit_code == 0 and "from-pull" in Path(done.log_path).read_text()
        # still used by a (stopped) container: its layers back that container's rootfs
        with pytest.raises(grpc.RpcError) as e:
            c.img.RemoveImage(pb.RemoveImageRequest(image=spec(image_ref)))
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and cid in e.value.details()
        c.remove(cid)
        c.img.RemoveImage(pb.RemoveImageRequest(image=spec(ref)))
        c.img.RemoveImage(pb.RemoveImageRequest(image=spec(ref)))  # idempotent
        assert not c.img.ImageStatus(pb.ImageStatusRequest(image=spec(ref))).HasField("image")
        with pytest.raises(grpc.RpcError) as e:
            c.img.PullImage(pb.PullImageRequest(image=spec(f"{reg.host}/pulled/absent:v1")))
        assert e.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNKNOWN)
    finally:
        reg.stop()
