"""The same CRI client lifecycle against our runtime and against Debian's containerd + runc.

A check that holds on ours but fails on containerd would mean our client side (and so our
expectations of a runtime) is wrong; these run on both.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import grpc
import pytest

from cri.client import container_config
from cri.proto import api_pb2 as pb
from cri.runtime.service import RuntimeOptions
from kernel.cgroups import hierarchies
from tests.harness.resources import unique
from tests.integration.cri.conftest import BUSYBOX, Pods
from tests.integration.cri.containerd import Containerd, available
from tests.integration.cri.daemon import CRIDaemon

pytestmark = [pytest.mark.root, pytest.mark.slow]

LOG_LINE = re.compile(r"^\S+ (stdout|stderr) (F|P) (.*)$")


def bridge_conflist(tmp: Path) -> tuple[dict, str]:
    bridge = unique("br")
    n = os.getpid() % 250
    return {"cniVersion": "0.4.0", "name": f"peer-{bridge}", "plugins": [
        {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False,
         "ipam": {"type": "host-local", "dataDir": str(tmp / "ipam"),
                  "ranges": [[{"subnet": f"10.{101 + n % 40}.{n}.0/24"}]],
                  "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "loopback"}]}, bridge


@pytest.fixture(scope="module", params=["nodeagent", "containerd"])
def peer(request, tmp_path_factory, images):
    root = tmp_path_factory.mktemp(request.param)
    conf, bridge = bridge_conflist(root)
    d: CRIDaemon | Containerd
    if request.param == "nodeagent":
        d = CRIDaemon(root, network=False)
        d.import_images([images.busybox.docker_archive])
    else:
        why = available()
        if why:
            pytest.skip(why)
        d = Containerd(root)
    (d.cni_conf).mkdir(parents=True, exist_ok=True)
    (d.cni_conf / "10-peer.conflist").write_text(json.dumps(conf))
    d.start()
    if isinstance(d, Containerd):
        d.import_images(images, RuntimeOptions(state_dir=root).pause, [])
    try:
        yield request.param, d
    finally:
        if d.client is not None:
            for s in d.client.list_pod_sandbox():
                d.client.stop_pod_sandbox(s.id)
                d.client.remove_pod_sandbox(s.id)
        d.stop()
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)


@pytest.fixture
def ppods(peer, tmp_path):
    name, d = peer
    p = Pods(d, tmp_path)
    try:
        yield p
    finally:
        if name == "containerd":
            # runc leaves the cgroup_parent it created (kubelet owns pod cgroups); ours removes what it made
            from tests.harness.resources import remove_cgroup

            for sid in p.ids:
                try:
                    d.client.stop_pod_sandbox(sid)
                    d.client.remove_pod_sandbox(sid)
                except grpc.RpcError as e:
                    if e.code() != grpc.StatusCode.NOT_FOUND:
                        raise
            p.ids.clear()
            for parent in p.parents:
                for r in hierarchies():  # runc makes the parent in every hierarchy, name=systemd too
                    remove_cgroup(Path(r + parent))
            p.parents.clear()
        p.close()


def test_pod_and_container_lifecycle(peer, ppods):
    name, d = peer
    c = d.client
    sid, scfg = ppods.run(hostname="peerpod")
    st = c.pod_sandbox_status(sid).status
    assert st.state == pb.SANDBOX_READY and st.metadata.name == scfg.metadata.name
    assert st.network.ip.startswith("10.")
    cfg = container_config("app", BUSYBOX, ["sh", "-c", "echo started; exec sleep 300"], log_path="app/0.log")
    cid = c.create_container(sid, cfg, scfg)
    assert c.container_status(cid).status.state == pb.CONTAINER_CREATED
    c.start_container(cid)
    assert c.wait_container_state(cid, pb.CONTAINER_RUNNING).state == pb.CONTAINER_RUNNING
    r = c.exec_sync(cid, ["sh", "-c", "hostname; cat /proc/1/cmdline | tr '\\0' ' '; exit 4"])
    out = r.stdout.decode().splitlines()
    assert out[0] == "peerpod" and out[1].startswith("sleep 300") and r.exit_code == 4
    ids = [x.id for x in c.list_containers(pod_sandbox_id=sid)]
    assert ids == [cid]
    log = Path(c.container_status(cid).status.log_path)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not (log.exists() and "started" in log.read_text()):
        time.sleep(0.05)
    m = LOG_LINE.match(log.read_text().splitlines()[0])
    assert m and m.groups() == ("stdout", "F", "started")
    c.stop_container(cid, 0)
    st = c.container_status(cid).status
    assert st.state == pb.CONTAINER_EXITED and st.exit_code == 137
    c.remove_container(cid)
    with pytest.raises(grpc.RpcError) as e:
        c.container_status(cid)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    c.stop_pod_sandbox(sid)
    assert c.pod_sandbox_status(sid).status.state == pb.SANDBOX_NOTREADY
    c.remove_pod_sandbox(sid)
    with pytest.raises(grpc.RpcError) as e:
        c.pod_sandbox_status(sid)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_exit_code_and_unknown_image(peer, ppods):
    name, d = peer
    c = d.client
    sid, scfg = ppods.run()
    cid = c.create_container(sid, container_config("exits", BUSYBOX, ["sh", "-c", "exit 9"]), scfg)
    c.start_container(cid)
    st = c.wait_container_state(cid, pb.CONTAINER_EXITED)
    assert st.exit_code == 9 and st.reason == "Error"
    with pytest.raises(grpc.RpcError) as e:
        c.create_container(sid, container_config("ghost", "localhost/no-such-image:1", ["true"]), scfg)
    assert e.value.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNKNOWN)
    assert "no-such-image" in (e.value.details() or "")


def test_remove_running_pod_kills_everything(peer, ppods):
    name, d = peer
    c = d.client
    sid, scfg = ppods.run()
    cid = c.create_container(sid, container_config("busy", BUSYBOX, ["sleep", "300"]), scfg)
    c.start_container(cid)
    c.stop_pod_sandbox(sid)
    assert c.container_status(cid).status.state == pb.CONTAINER_EXITED
    c.remove_pod_sandbox(sid)
    assert not c.list_containers(id=cid)


def test_the_log_exists_when_start_returns(peer, ppods):
    """containerd opens the CRI log before the task starts, and StartContainer fails when it cannot:
    a caller may follow the log at once (our Attach does). Ours makes it before the launch, too."""
    name, d = peer
    c = d.client
    sid, scfg = ppods.run()
    ccfg = container_config("quiet", BUSYBOX, ["sleep", "300"], log_path="quiet/0.log")
    cid = c.create_container(sid, ccfg, scfg)
    c.start_container(cid)
    assert Path(c.container_status(cid).status.log_path).is_file()  # the command wrote nothing yet
    cfg = container_config("nolog", BUSYBOX, ["sleep", "300"], log_path="nolog/0.log")
    blocked = c.create_container(sid, cfg, scfg)
    log_dir = Path(c.container_status(blocked).status.log_path).parent
    if log_dir.exists():
        log_dir.rmdir()
    log_dir.write_text("a file where the log's directory should be\n")
    with pytest.raises(grpc.RpcError) as e:
        c.start_container(blocked)
    assert "log" in (e.value.details() or ""), e.value.details()
    assert c.container_status(blocked).status.state == pb.CONTAINER_EXITED
