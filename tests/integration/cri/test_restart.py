"""The runtime outlives its daemon: kill -9, restart, everything is re-adopted and exits are reported."""

from __future__ import annotations

import json
import os
import time

import pytest

from cri.proto import api_pb2 as pb
from tests.integration.cri.daemon import reap

pytestmark = pytest.mark.root


def test_kill_9_and_restart_readopts_everything(own):
    d, pods = own
    c = d.client
    sid, scfg = pods.run(hostname="survivor")
    long = pods.container(sid, scfg, ["sleep", "300"], name="long")
    short = pods.container(sid, scfg, ["sh", "-c", "sleep 2; exit 7"], name="short")
    pause_pid = json.loads(c.pod_sandbox_status(sid, verbose=True).info["info"])["pid"]
    long_info, short_info = pods.info(long), pods.info(short)

    d.kill()
    # While the runtime is down: the pod keeps running, and the short container exits with code 7.
    time.sleep(3)
    assert os.path.exists(f"/proc/{long_info['pid']}") and os.path.exists(f"/proc/{pause_pid}")
    reap([short_info["shimPid"]])

    c = d.start()
    pods.c = c
    assert c.pod_sandbox_status(sid).status.state == pb.SANDBOX_READY
    st = c.container_status(long).status
    assert st.state == pb.CONTAINER_RUNNING
    st = c.container_status(short).status
    assert st.state == pb.CONTAINER_EXITED and st.exit_code == 7 and st.finished_at > st.started_at
    ids = {x.id for x in c.list_containers()}
    assert {long, short} <= ids
    assert c.exec_sync(long, ["hostname"]).stdout == b"survivor\n"

    # The re-adopted container is still fully managed: stop reports its exit, remove cleans up.
    c.stop_container(long, 0)
    st = c.container_status(long).status
    assert st.state == pb.CONTAINER_EXITED and st.exit_code == 137
    reap([long_info["shimPid"], pause_pid])
    c.stop_pod_sandbox(sid)
    reap([pause_pid])


def test_pause_death_while_down_marks_sandbox_not_ready(own):
    d, pods = own
    c = d.client
    sid, _ = pods.run()
    pause_pid = json.loads(c.pod_sandbox_status(sid, verbose=True).info["info"])["pid"]
    d.kill()
    os.kill(pause_pid, 9)
    reap([pause_pid])
    c = d.start()
    pods.c = c
    assert c.pod_sandbox_status(sid).status.state == pb.SANDBOX_NOTREADY
