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


def test_status_list_fsinfo(cri, images):
    c = cri.client
    st = c.image_status(BUSYBOX, verbose=True)
    assert st.image.id == images.busybox.image_id
    assert BUSYBOX in st.image.repo_tags and st.image.size > 0
    assert "config" in st.info["info"]
    by_id = c.image_status(images.busybox.image_id)
    assert by_id.image.id == st.image.id
    missing = c.image_status("localhost/nothing:here")
    assert not missing.HasField("image")
    ids = {i.id for i in c.list_images()}
    assert images.busybox.image_id in ids
    fs = c.image_fs_info().image_filesystems
    assert fs and fs[0].used_bytes.value > 0 and fs[0].fs_id.mountpoint
    with pytest.raises(grpc.RpcError) as e:
        c.image_status("")
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
        image_ref = c.pull_image(ref)
        assert image_ref == images.busybox.image_id
        st = c.image_status(ref).image
        assert ref in st.repo_tags
        sid, scfg = pods.run()
        ccfg = container_config("pulled", ref, ["sh", "-c", "echo from-pull"], log_path="p/0.log")
        cid = c.create_container(sid, ccfg, scfg)
        c.start_container(cid)
        done = c.wait_container_state(cid, pb.CONTAINER_EXITED)
        assert done.exit_code == 0 and "from-pull" in Path(done.log_path).read_text()
        # still used by a (stopped) container: its layers back that container's rootfs
        with pytest.raises(grpc.RpcError) as e:
            c.remove_image(image_ref)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and cid in (e.value.details() or "")
        c.remove_container(cid)
        c.remove_image(ref)
        c.remove_image(ref)  # idempotent
        assert not c.image_status(ref).HasField("image")
        with pytest.raises(grpc.RpcError) as e:
            c.pull_image(f"{reg.host}/pulled/absent:v1")
        assert e.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNKNOWN)
    finally:
        reg.stop()
