"""The runtime's side of the pod-spec fields the kubelet maps to CRI (issue 20 item 3), on the real kernel:
supplementalGroupsPolicy Strict against Merge, a debug container in its target's pid namespace (TARGET), and
the handlers and features the runtime advertises."""

from __future__ import annotations

import grpc
import pytest

from cri.client import container_config
from cri.proto import api_pb2 as pb
from tests.integration.cri.conftest import BUSYBOX

pytestmark = pytest.mark.root


@pytest.mark.parametrize(("policy", "groups"), [(pb.Merge, "1000 100 2000 4000"), (pb.Strict, "1000 4000")])
def test_supplemental_groups_policy(cri, pods, policy, groups):
    sid, scfg = pods.run()
    cfg = container_config("ids", BUSYBOX, ["sleep", "300"])
    sec = cfg.linux.security_context
    sec.run_as_user.value = 1000
    sec.supplemental_groups.append(4000)
    sec.supplemental_groups_policy = policy
    cid = cri.client.create_container(sid, cfg, scfg)
    cri.client.start_container(cid)
    assert cri.client.exec_sync(cid, ["id", "-G"]).stdout.decode().split() == groups.split()
    user = cri.client.container_status(cid).status.user.linux
    assert (user.uid, user.gid, sorted(user.supplemental_groups)) == (1000, 1000, sorted(
        int(g) for g in groups.split()[1:]))


def test_target_pid_namespace_sees_the_target_only(cri, pods):
    sid, scfg = pods.run()
    app = pods.container(sid, scfg, ["sleep", "4321"], name="app")
    other = pods.container(sid, scfg, ["sleep", "9876"], name="other")
    cfg = container_config("dbg", BUSYBOX, ["sleep", "300"])
    cfg.linux.security_context.namespace_options.pid = pb.TARGET
    cfg.linux.security_context.namespace_options.target_id = app
    dbg = cri.client.create_container(sid, cfg, scfg)
    cri.client.start_container(dbg)
    seen = cri.client.exec_sync(dbg, ["ps", "-o", "args"]).stdout.decode()
    assert "sleep 4321" in seen and "sleep 9876" not in seen, seen
    assert other
    bad = container_config("dbg2", BUSYBOX, ["sleep", "300"])
    bad.linux.security_context.namespace_options.pid = pb.TARGET
    bad.linux.security_context.namespace_options.target_id = "0" * 64
    with pytest.raises(grpc.RpcError) as e:
        cri.client.create_container(sid, bad, scfg)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_status_advertises_every_handler_and_the_groups_feature(cri, pods):
    st = cri.client.status()
    assert [h.name for h in st.runtime_handlers] == ["", "runc", "nodeagent"]
    assert st.features.supplemental_groups_policy
    cfg = pods.config()
    sid = cri.client.run_pod_sandbox(cfg, "runc")
    pods.ids.append(sid)
    assert cri.client.pod_sandbox_status(sid).status.runtime_handler == "runc"
    with pytest.raises(grpc.RpcError) as e:
        cri.client.run_pod_sandbox(pods.config(), "kata")
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
