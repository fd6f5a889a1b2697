"""critest idempotence.go: "Idempotence" (api.proto: Stop*/Remove* of what is gone must succeed)."""

import uuid

from cri.proto import api_pb2 as pb
from tests.conformance.cri.conftest import containerd_fails


@containerd_fails("StopPodSandbox of an unknown id answers NotFound")
def test_stoppodsandbox_should_not_return_an_error_if_not_found(f):
    f.c.stop_pod_sandbox(str(uuid.uuid4()))


def test_stoppodsandbox_should_not_return_an_error_if_already_stopped(f):
    sid = f.run_default_pod("idempotence-pod-")
    for _ in range(2):
        f.c.stop_pod_sandbox(sid)
        assert f.pod_status(sid).state == pb.SANDBOX_NOTREADY
    f.c.remove_pod_sandbox(sid)


def test_removepodsandbox_should_not_return_an_error_if_not_found(f):
    f.c.remove_pod_sandbox(str(uuid.uuid4()))


@containerd_fails("StopContainer of an unknown id answers NotFound")
def test_stopcontainer_should_not_return_an_error_if_not_found(f):
    f.c.stop_container(str(uuid.uuid4()), grace=0)


def test_stopcontainer_should_not_return_an_error_if_already_stopped(f):
    sid, pod = f.pod_for_container()
    cid = f.create_pause(sid, pod, "idempotence-container-")
    f.start(cid)
    f.stop_exited(cid)
    f.c.remove_container(cid)
    f.c.remove_container(cid)
    f.c.stop_pod_sandbox(sid)
    f.c.remove_pod_sandbox(sid)


def test_removecontainer_should_not_return_an_error_if_not_found(f):
    f.c.remove_container(str(uuid.uuid4()))


def test_removeimage_should_not_return_an_error_if_not_found(f):
    fake = "0" * 64
    for _ in range(2):
        f.c.remove_image(fake)
