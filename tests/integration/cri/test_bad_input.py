"""Bad input gets the right gRPC code, names the field, and leaves nothing half-made behind."""

from __future__ import annotations

import functools

import grpc
import pytest

from cri.client import container_config, sandbox_config
from cri.proto import api_pb2 as pb
from tests.integration.cri.conftest import BUSYBOX
from tests.integration.cri.daemon import mounts_under

pytestmark = pytest.mark.root


def code_of(fn, *args) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as e:
        fn(*args)
    return e.value.code(), e.value.details() or ""


def state_dirs(cri) -> tuple[set[str], set[str]]:
    return ({p.name for p in (cri.state / "sandboxes").iterdir()},
            {p.name for p in (cri.state / "containers").iterdir()})


def test_unknown_ids(cri):
    c = cri.client
    assert code_of(c.pod_sandbox_status, "nope")[0] == grpc.StatusCode.NOT_FOUND
    assert code_of(c.container_status, "nope")[0] == grpc.StatusCode.NOT_FOUND
    assert code_of(c.exec_sync, "nope", ["true"])[0] == grpc.StatusCode.NOT_FOUND
    assert code_of(c.start_container, "nope")[0] == grpc.StatusCode.NOT_FOUND
    # Stop and Remove of what does not exist succeed (idempotent, as kubelet expects)
    c.stop_pod_sandbox("nope")
    c.remove_pod_sandbox("nope")
    c.stop_container("nope")
    c.remove_container("nope")
    cfg = container_config("x", BUSYBOX, ["true"])
    assert code_of(c.create_container, "nope", cfg, pb.PodSandboxConfig())[0] == grpc.StatusCode.NOT_FOUND


def test_invalid_sandbox_configs(cri, pods):
    c = cri.client
    before = state_dirs(cri)
    assert code_of(c.run_pod_sandbox, pb.PodSandboxConfig())[0] == grpc.StatusCode.INVALID_ARGUMENT
    cfg = pods.config()
    cfg.metadata.namespace = ""
    code, msg = code_of(c.run_pod_sandbox, cfg)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "namespace" in msg
    cfg = pods.config()
    code, msg = code_of(c.run_pod_sandbox, cfg, "no-such-handler")
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "runtime_handler" in msg
    assert state_dirs(cri) == before


def test_duplicate_sandbox_and_container_names(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    code, msg = code_of(c.run_pod_sandbox, scfg)
    assert code == grpc.StatusCode.ALREADY_EXISTS and sid in msg
    pods.container(sid, scfg, ["sleep", "300"], name="dup")
    before = state_dirs(cri)
    code, _ = code_of(c.create_container, sid, container_config("dup", BUSYBOX, ["true"], log_path="x.log"),
                      scfg)
    assert code == grpc.StatusCode.ALREADY_EXISTS
    assert state_dirs(cri) == before
    # another attempt of the same sandbox name is a new sandbox
    again = pb.PodSandboxConfig()
    again.CopyFrom(scfg)
    again.metadata.attempt = 1
    sid2, _ = pods.run(again)
    assert sid2 != sid


def test_invalid_container_configs_leave_nothing(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    before = state_dirs(cri)
    mounts_before = mounts_under(cri.root)

    missing = container_config("img", "localhost/does-not-exist:1", ["true"])
    code, msg = code_of(c.create_container, sid, missing, scfg)
    assert code == grpc.StatusCode.NOT_FOUND and "does-not-exist" in msg

    bad = container_config("quota", BUSYBOX, ["true"])
    bad.linux.resources.cpu_quota = 5
    code, msg = code_of(c.create_container, sid, bad, scfg)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "cpu_quota" in msg

    bad = container_config("mnt", BUSYBOX, ["true"])
    bad.mounts.add(container_path="relative/path", host_path="/tmp")
    code, msg = code_of(c.create_container, sid, bad, scfg)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "container_path" in msg

    bad = container_config("mnt2", BUSYBOX, ["true"])
    bad.mounts.add(container_path="/data", host_path="/nonexistent/nodeagent/path")
    code, msg = code_of(c.create_container, sid, bad, scfg)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "host_path" in msg

    bad = container_config("grp", BUSYBOX, ["true"])
    bad.linux.security_context.run_as_group.value = 5
    code, msg = code_of(c.create_container, sid, bad, scfg)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "run_as_group" in msg

    bad = container_config("user", BUSYBOX, ["true"])
    bad.linux.security_context.run_as_username = "no-such-user"
    code, msg = code_of(c.create_container, sid, bad, scfg)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "no-such-user" in msg

    bad = container_config("cap", BUSYBOX, ["true"])
    bad.linux.security_context.capabilities.add_capabilities.append("CAP_FLY")
    code, msg = code_of(c.create_container, sid, bad, scfg)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "CAP_FLY" in msg

    assert code_of(c.create_container, sid, pb.ContainerConfig(), scfg)[0] == grpc.StatusCode.INVALID_ARGUMENT
    assert state_dirs(cri) == before
    assert mounts_under(cri.root) == mounts_before


def test_start_failure_is_reported_and_cleaned(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, ["/no/such/binary"], start=False)
    code, msg = code_of(c.start_container, cid)
    assert code == grpc.StatusCode.UNKNOWN and "/no/such/binary" in msg
    st = c.container_status(cid).status
    assert st.state == pb.CONTAINER_EXITED and st.reason == "StartError" and st.exit_code == 128
    assert code_of(c.start_container, cid)[0] == grpc.StatusCode.FAILED_PRECONDITION
    c.remove_container(cid)
    assert cid not in state_dirs(cri)[1]


def test_container_in_stopped_sandbox_and_unimplemented_verbs(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, ["sleep", "300"])
    # attach with stdin is served (test_attach_stdin.py); a terminal with a separate stderr is not
    code, msg = code_of(functools.partial(c.attach, cid, tty=True, stdout=True, stderr=True))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "tty" in msg
    code, msg = code_of(c.exec, cid, ["sh"])
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert code_of(c.checkpoint_container, cid)[0] == grpc.StatusCode.UNIMPLEMENTED
    c.stop_pod_sandbox(sid)
    assert c.container_status(cid).status.state == pb.CONTAINER_EXITED
    code, _ = code_of(c.create_container, sid, container_config("late", BUSYBOX, ["true"]), scfg)
    assert code == grpc.StatusCode.FAILED_PRECONDITION


def test_host_network_sandbox(cri, pods):
    c = cri.client
    sid, scfg = pods.run(sandbox_config("hostnet", host_network=True, cgroup_parent="/" + __import__(
        "tests.harness.resources", fromlist=["unique"]).unique("cg")))
    pods.parents.append(scfg.linux.cgroup_parent)
    cid = pods.container(sid, scfg, ["sleep", "300"])
    import os

    pid = pods.info(cid)["pid"]
    assert os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net")
    assert c.pod_sandbox_status(sid).status.network.ip == ""
