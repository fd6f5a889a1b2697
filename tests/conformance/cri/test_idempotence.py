"""critest idempotence.go: "Idempotence" (api.proto: Stop*/Remove* of what is gone must succeed)."""

import uuid

from cri.proto import api_pb2 as pb
from tests.conformance.cri.conftest import containerd_fails


@containerd_fails("StopPodSandbox of an unknown id answers NotFound")
def test_stoppodsandbox_should_not_return_an_error_if_not_found(f):
    f.rt.StopPodSandbox(pb.StopPodSandboxRequest(pod_sandbox_id=str(uuid.uuid4())))


def test_stoppodsandbox_should_not_return_an_error_if_already_stopped(f):
    sid = f.run_default_pod("idempotence-pod-")
    for _ in range(2):
        f.c.stop_sandbox(sid)
        assert f.pod_status(sid).state == pb.SANDBOX_NOTREADY
    f.c.remove_sandbox(sid)


def test_removepodsandbox_should_not_return_an_error_if_not_found(f):
    f.rt.RemovePodSandbox(pb.RemovePodSandboxRequest(pod_sandbox_id=str(uuid.uuid4())))


@containerd_fails("StopContainer of an unknown id answers NotFound")
def test_stopcontainer_should_not_return_an_error_if_not_found(f):
    f.rt.StopContainer(pb.StopContainerRequest(container_id=str(uuid.uuid4()), timeout=0))


def test_stopcontainer_should_not_return_an_error_if_already_stopped(f):
    sid, pod = f.pod_for_container()
    cid = f.create_pause(sid, pod, "idempotence-container-")
    f.start(cid)
    f.stop_exited(cid)
    f.c.remove(cid)
    f.c.remove(cid)
    f.c.stop_sandbox(sid)
    f.c.remove_sandbox(sid)


def test_removecontainer_should_not_return_an_error_if_not_found(f):
    f.rt.RemoveContainer(pb.RemoveContainerRequest(container_id=str(uuid.uuid4())))


def test_removeimage_should_not_return_an_error_if_not_found(f):
    fake = "0" * 64
    for _ in range(2):
        f.img.RemoveImage(pb.RemoveImageRequest(image=pb.ImageSpec(image=fake)))
