"""Sandbox and container lifecycle through the CRI socket, on the real kernel."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import grpc
import pytest

from cri.proto import api_pb2 as pb
from tests.harness.resources import unique
from tests.integration.cri.conftest import CONFIGURED
from tests.integration.cri.daemon import mounts_under

pytestmark = pytest.mark.root

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+(Z|[+-]\d\d:\d\d) (stdout|stderr) (F|P) (.*)$")


def ns_inode(pid: int | str, kind: str) -> str:
    return os.readlink(f"/proc/{pid}/ns/{kind}")


def test_version_and_status(cri):
    c = cri.client
    v = c.version("v1")
    assert v.runtime_name == "nodeagent" and v.runtime_api_version == "v1"
    st = c.status()
    conds = {x.type: x.status for x in st.status.conditions}
    assert conds["RuntimeReady"] is True
    assert conds["NetworkReady"] is True  # the harness's conflist (test_cni_not_initialized: without)
    assert c.runtime_config().linux.cgroup_driver == pb.CGROUPFS


def test_sandbox_lifecycle_namespaces_and_cleanup(cri, pods):
    c = cri.client
    sid, cfg = pods.run(hostname="pod-one")
    st = c.pod_sandbox_status(sid, verbose=True)
    assert st.status.state == pb.SANDBOX_READY
    assert st.status.metadata.name == cfg.metadata.name
    import json

    info = json.loads(st.info["info"])
    pid = info["pid"]
    for kind in ("net", "uts", "ipc"):
        assert ns_inode(pid, kind) != ns_inode("self", kind), kind
    assert ns_inode(pid, "mnt") == ns_inode("self", "mnt")  # pause needs no mount namespace
    rss = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
    assert rss
    rss_kb = int(rss.group(1))
    assert rss_kb < 1024, f"pause RSS {rss_kb} kB"
    items = c.list_pod_sandbox(id=sid)
    assert [i.id for i in items] == [sid]

    c.stop_pod_sandbox(sid)
    assert c.pod_sandbox_status(sid).status.state == pb.SANDBOX_NOTREADY
    stat = Path(f"/proc/{pid}/stat")
    assert not Path(f"/proc/{pid}").exists() or "Z" in stat.read_text().split(")")[-1][:3]
    c.stop_pod_sandbox(sid)  # idempotent
    c.remove_pod_sandbox(sid)
    c.remove_pod_sandbox(sid)  # idempotent
    with pytest.raises(grpc.RpcError) as e:
        c.pod_sandbox_status(sid)
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    assert not (cri.state / "sandboxes" / sid).exists()
    assert not mounts_under(cri.state / "sandboxes")


def test_container_lifecycle_logs_exec(cri, pods):
    c = cri.client
    sid, scfg = pods.run(hostname="lifecycle")
    cid = pods.container(sid, scfg, ["sh", "-c", "echo out-line; echo err-line >&2; printf partial; "
                                                "trap 'exit 143' TERM; sleep 300 & wait"],
                         start=False)
    assert c.container_status(cid).status.state == pb.CONTAINER_CREATED
    c.start_container(cid)
    st = c.wait_container_state(cid, pb.CONTAINER_RUNNING)
    assert st.state == pb.CONTAINER_RUNNING and st.started_at > 0
    info = pods.info(cid)
    pid = info["pid"]
    # joins the sandbox's net/uts/ipc; its own mount and pid namespaces, where it is PID 1
    sinfo = __import__("json").loads(c.pod_sandbox_status(sid, verbose=True).info["info"])
    for kind in ("net", "uts", "ipc"):
        assert ns_inode(pid, kind) == ns_inode(sinfo["pid"], kind)
    for kind in ("mnt", "pid"):
        assert ns_inode(pid, kind) != ns_inode(sinfo["pid"], kind)
    r = c.exec_sync(cid,
                    ["sh", "-c", "hostname; cat /proc/1/cmdline | tr '\\0' ' '; echo; echo oops >&2; exit 3"])
    lines = r.stdout.decode().splitlines()
    assert lines[0] == "lifecycle"
    assert lines[1].startswith("sh -c echo out-line")  # the container's command is its PID 1
    assert r.stderr == b"oops\n" and r.exit_code == 3

    log = Path(st.log_path)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and "err-line" not in log.read_text():
        time.sleep(0.05)
    entries = [LOG_LINE.match(x) for x in log.read_text().splitlines()]
    assert all(entries), log.read_text()
    got = {(m.group(2), m.group(3), m.group(4)) for m in entries if m}
    assert ("stdout", "F", "out-line") in got and ("stderr", "F", "err-line") in got

    t0 = time.monotonic()
    c.stop_container(cid, grace=20)
    assert time.monotonic() - t0 < 15  # SIGTERM handled: no wait for the SIGKILL deadline
    st = c.container_status(cid).status
    assert st.state == pb.CONTAINER_EXITED and st.exit_code == 143 and st.finished_at >= st.started_at
    # "partial" had no newline: it is flushed when the stream closes
    assert "stdout F partial" in log.read_text() or "stdout P partial" in log.read_text()
    rootfs = info["rootfs"]
    c.remove_container(cid)
    assert not os.path.ismount(rootfs) and not Path(rootfs).exists()
    assert not log.exists()
    c.remove_container(cid)  # idempotent
    c.stop_container(cid)


def test_image_config_is_merged(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, [], image=CONFIGURED)
    st = c.wait_container_state(cid, pb.CONTAINER_EXITED)
    assert st.exit_code == 0 and st.reason == "Completed"
    text = Path(st.log_path).read_text()
    assert "configured hello from /work as 1000:1000" in text
    assert st.user.linux.uid == 1000 and st.user.linux.gid == 1000


def test_two_containers_share_localhost_and_ipc(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    server = pods.container(sid, scfg, ["httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/etc"], name="server")
    client = pods.container(sid, scfg, ["sleep", "300"], name="client")
    c.wait_container_state(server, pb.CONTAINER_RUNNING)
    body = b""
    for _ in range(50):
        r = c.exec_sync(client, ["wget", "-q", "-O", "-", "http://127.0.0.1:8080/hostname"])
        if r.exit_code == 0:
            body = r.stdout
            break
        time.sleep(0.1)
    assert body.strip().decode() == scfg.hostname
    assert c.exec_sync(server, ["sh", "-c", "echo shared > /dev/shm/token"]).exit_code == 0
    assert c.exec_sync(client, ["cat", "/dev/shm/token"]).stdout == b"shared\n"
    a, b = pods.info(server)["pid"], pods.info(client)["pid"]
    assert ns_inode(a, "ipc") == ns_inode(b, "ipc") and ns_inode(a, "net") == ns_inode(b, "net")


def test_cgroup_limits_and_live_update(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    from cri.client import container_config

    cfg = container_config("limited", "localhost/busybox:latest", ["sleep", "300"])
    r = cfg.linux.resources
    r.cpu_period, r.cpu_quota, r.cpu_shares = 100000, 50000, 512
    r.memory_limit_in_bytes = 64 << 20
    r.unified["pids.max"] = "42"
    cid = c.create_container(sid, cfg, scfg)
    c.start_container(cid)
    cg = pods.info(cid)["cgroup"]
    from kernel.cgroups import detect_cgroups

    info = detect_cgroups()
    if info.version == "v1":
        m = info.v1_controllers
        assert Path(m["cpu"] + cg, "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert Path(m["cpu"] + cg, "cpu.cfs_period_us").read_text().strip() == "100000"
        assert Path(m["cpu"] + cg, "cpu.shares").read_text().strip() == "512"
        assert Path(m["memory"] + cg, "memory.limit_in_bytes").read_text().strip() == str(64 << 20)
        assert Path(m["pids"] + cg, "pids.max").read_text().strip() == "42"
        pid = pods.info(cid)["pid"]
        assert str(pid) in Path(m["memory"] + cg, "cgroup.procs").read_text().split()
        upd = pb.LinuxContainerResources(cpu_period=100000, cpu_quota=20000, memory_limit_in_bytes=32 << 20)
        c.update_container_resources(cid, upd)
        assert Path(m["cpu"] + cg, "cpu.cfs_quota_us").read_text().strip() == "20000"
        assert Path(m["memory"] + cg, "memory.limit_in_bytes").read_text().strip() == str(32 << 20)
    else:
        root = info.v2_root
        assert Path(root + cg, "cpu.max").read_text().split() == ["50000", "100000"]
        assert Path(root + cg, "pids.max").read_text().strip() == "42"
    stats = c.container_stats(cid)
    assert stats.memory.working_set_bytes.value > 0 and stats.attributes.id == cid


def test_oom_killed_is_reported(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    from cri.client import container_config

    cfg = container_config("hog", "localhost/busybox:latest", ["tail", "/dev/zero"])
    cfg.linux.resources.memory_limit_in_bytes = 16 << 20
    cfg.linux.resources.memory_swap_limit_in_bytes = 16 << 20
    cid = c.create_container(sid, cfg, scfg)
    c.start_container(cid)
    st = c.wait_container_state(cid, pb.CONTAINER_EXITED, 60)
    assert st.state == pb.CONTAINER_EXITED
    assert st.reason == "OOMKilled" and st.exit_code == 137


def test_security_defaults_readonly_rootfs_and_masks(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    from cri.client import container_config

    cfg = container_config("locked", "localhost/busybox:latest", ["sleep", "300"])
    sec = cfg.linux.security_context
    sec.readonly_rootfs = True
    sec.no_new_privs = True
    sec.capabilities.drop_capabilities.append("NET_RAW")
    cid = c.create_container(sid, cfg, scfg)
    c.start_container(cid)
    assert c.exec_sync(cid, ["touch", "/newfile"]).exit_code != 0
    assert c.exec_sync(cid, ["sh", "-c", "echo x > /dev/shm/ok"]).exit_code == 0
    status = c.exec_sync(cid, ["cat", "/proc/self/status"]).stdout.decode()
    m = re.search(r"CapBnd:\s+([0-9a-f]+)", status)
    assert m, status
    bnd = int(m.group(1), 16)
    from cri.runtime import caps
    from kernel import caps as kcaps

    expected = kcaps.mask([x for x in caps.DEFAULT if x != "NET_RAW"])
    assert bnd == expected
    assert re.search(r"NoNewPrivs:\s+1", status)
    assert c.exec_sync(cid, ["cat", "/proc/kcore"]).stdout == b""  # masked with /dev/null
    assert c.exec_sync(cid, ["sh", "-c", "echo 1 > /proc/sys/kernel/domainname"]).exit_code != 0


def test_reopen_container_log(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg,
                         ["sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.05; done"])
    log = Path(c.container_status(cid).status.log_path)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and "tick" not in log.read_text():
        time.sleep(0.05)
    rotated = log.with_name("0.log.1")
    log.rename(rotated)
    c.reopen_container_log(cid)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not (log.exists() and "tick" in log.read_text()):
        time.sleep(0.05)
    assert "tick" in log.read_text() and "tick" in rotated.read_text()
    rotated.unlink()


def test_exec_timeout_and_stopped_container(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, ["sleep", "300"])
    with pytest.raises(grpc.RpcError) as e:
        c.exec_sync(cid, ["sleep", "30"], timeout_s=1)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    c.stop_container(cid, 0)
    with pytest.raises(grpc.RpcError) as e:
        c.exec_sync(cid, ["true"])
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_container_events_and_stats(cri, pods):
    import threading

    c = cri.client
    stream = c.get_container_events()
    seen: list[tuple[str, int]] = []

    def consume():
        try:
            for ev in stream:
                seen.append((ev.container_id, ev.container_event_type))
        except grpc.RpcError:
            pass

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    time.sleep(0.2)
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, ["sleep", "300"])
    stats = c.list_container_stats(pod_sandbox_id=sid)
    assert [s.attributes.id for s in stats] == [cid]
    pod_stats = c.pod_sandbox_stats(sid)
    assert pod_stats.attributes.id == sid and pod_stats.linux.process.process_count.value >= 1
    c.stop_container(cid, 0)
    c.remove_container(cid)
    deadline = time.monotonic() + 5
    want = [pb.CONTAINER_CREATED_EVENT, pb.CONTAINER_STARTED_EVENT, pb.CONTAINER_STOPPED_EVENT,
            pb.CONTAINER_DELETED_EVENT]
    while time.monotonic() < deadline and [k for i, k in seen if i == cid] != want:
        time.sleep(0.05)
    stream.cancel()
    assert [k for i, k in seen if i == cid] == want


def test_seccomp_runtime_default_and_unconfined(cri, pods):
    c = cri.client
    sid, scfg = pods.run()
    from cri.client import container_config

    confined = container_config("confined", "localhost/busybox:latest", ["sleep", "300"])
    confined.linux.security_context.seccomp.profile_type = pb.SecurityProfile.RuntimeDefault
    free = container_config("free", "localhost/busybox:latest", ["sleep", "300"])
    free.linux.security_context.seccomp.profile_type = pb.SecurityProfile.Unconfined
    a, b = c.create_container(sid, confined, scfg), c.create_container(sid, free, scfg)
    c.start_container(a)
    c.start_container(b)
    assert re.search(r"Seccomp:\s+2", c.exec_sync(a, ["cat", "/proc/1/status"]).stdout.decode())
    assert re.search(r"Seccomp:\s+2", c.exec_sync(a, ["cat", "/proc/self/status"]).stdout.decode())
    assert re.search(r"Seccomp:\s+0", c.exec_sync(b, ["cat", "/proc/1/status"]).stdout.decode())
    local = container_config("local", "localhost/busybox:latest", ["true"])
    local.linux.security_context.seccomp.profile_type = pb.SecurityProfile.Localhost
    with pytest.raises(grpc.RpcError) as e:  # a Localhost profile needs a profile file
        c.create_container(sid, local, scfg)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "localhost_ref" in (e.value.details() or "")


def test_apparmor_as_containerd_applies_it(cri, pods):
    """RuntimeDefault unless told otherwise, none for privileged containers, the same profile for
    execs, and a refused create leaves nothing behind; without AppArmor only "unconfined" is accepted."""
    from cri.client import container_config
    from cri.runtime import apparmor as aa

    c = cri.client
    sid, scfg = pods.run()

    def config(name, profile="", **kw):
        cfg = container_config(name, "localhost/busybox:latest", ["sleep", "300"], **kw)
        cfg.linux.security_context.apparmor_profile = profile
        return cfg

    def refused(cfg, code, text):
        before = sorted(os.listdir(cri.state / "containers"))
        with pytest.raises(grpc.RpcError) as e:
            c.create_container(sid, cfg, scfg)
        assert e.value.code() == code and text in (e.value.details() or ""), e.value.details()
        assert sorted(os.listdir(cri.state / "containers")) == before  # nothing half-made
        names = {x.metadata.name for x in c.list_containers()}
        assert cfg.metadata.name not in names

    def label(cid, path):
        return c.exec_sync(cid, ["cat", path]).stdout.decode().strip()

    refused(config("bad", "apparmor-profile-without-prefix"), grpc.StatusCode.INVALID_ARGUMENT,
            "apparmor_profile")
    if not aa.host_supports():
        for profile in ("runtime/default", "localhost/x"):
            refused(config("unsupported", profile), grpc.StatusCode.FAILED_PRECONDITION,
                    "apparmor is not supported")
        for i, profile in enumerate(("", "unconfined")):
            cid = c.create_container(sid, config(f"free{i}", profile), scfg)
            c.start_container(cid)
            assert c.exec_sync(cid, ["true"]).exit_code == 0
        return
    gone = "nodeagent-test-" + unique("aa")
    refused(config("unloaded", f"localhost/{gone}"), grpc.StatusCode.FAILED_PRECONDITION,
            "apparmor profile not found")
    default = c.create_container(sid, config("default"), scfg)
    free = c.create_container(sid, config("free", "unconfined"), scfg)
    priv = config("privileged")
    priv.linux.security_context.privileged = True
    priv = c.create_container(sid, priv, scfg)
    admin = config("admin", "runtime/default")
    admin.linux.security_context.capabilities.add_capabilities.append("SYS_ADMIN")
    admin = c.create_container(sid, admin, scfg)
    for cid in (default, free, priv, admin):
        c.start_container(cid)
    assert label(default, "/proc/1/attr/current") == f"{aa.DEFAULT_PROFILE} (enforce)"
    assert label(default, "/proc/self/attr/current") == f"{aa.DEFAULT_PROFILE} (enforce)"  # the exec too
    assert label(free, "/proc/1/attr/current") == "unconfined"
    assert label(priv, "/proc/self/attr/current") == "unconfined"
    # the profile, not the capability set, is what keeps mount out of reach here
    mount = ["sh", "-c", "mkdir -p /m && mount -t tmpfs t /m"]
    assert c.exec_sync(admin, mount).exit_code != 0
    assert c.exec_sync(priv, mount).exit_code == 0


def test_sysctls_and_devices(cri, pods):
    c = cri.client
    cfg = pods.config()
    cfg.linux.sysctls["net.ipv4.ip_local_port_range"] = "20000 30000"
    cfg.linux.sysctls["kernel.shm_rmid_forced"] = "1"
    host_range = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text()
    sid, scfg = pods.run(cfg)
    from cri.client import container_config

    ccfg = container_config("dev", "localhost/busybox:latest", ["sleep", "300"])
    ccfg.devices.add(container_path="/dev/extra-null", host_path="/dev/null", permissions="rw")
    cid = c.create_container(sid, ccfg, scfg)
    c.start_container(cid)
    out = c.exec_sync(cid,
                      ["cat", "/proc/sys/net/ipv4/ip_local_port_range", "/proc/sys/kernel/shm_rmid_forced"])
    assert out.stdout.decode().split() == ["20000", "30000", "1"]
    assert Path("/proc/sys/net/ipv4/ip_local_port_range").read_text() == host_range
    assert c.exec_sync(cid, ["sh", "-c", "echo x > /dev/extra-null"]).exit_code == 0
    # the devices cgroup: a node may be made (m) but not opened unless allowed
    r = c.exec_sync(cid, ["sh", "-c", "mknod /tmp/loopdev b 7 0 && head -c 1 /tmp/loopdev"])
    from kernel.cgroups import detect_cgroups

    if detect_cgroups().version == "v1":
        assert r.exit_code != 0 and b"not permitted" in r.stderr
    bad = pods.config()
    bad.linux.sysctls["kernel.panic"] = "1"
    with pytest.raises(grpc.RpcError) as e:
        c.run_pod_sandbox(bad)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "kernel.panic" in (e.value.details() or "")
    dev = container_config("nodev", "localhost/busybox:latest", ["true"])
    dev.devices.add(container_path="/dev/x", host_path="/etc/hostname")
    with pytest.raises(grpc.RpcError) as e:
        c.create_container(sid, dev, scfg)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not a device" in (e.value.details() or "")
