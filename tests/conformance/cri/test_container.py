"""critest container.go and container_linux.go: "Container", "Container Mount Propagation",
"Container OOM", "Container Mount Readonly"."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

import grpc
import pytest

from cri.proto import api_pb2 as pb
from kernel.syscalls import MNT_DETACH, MS_BIND, MS_PRIVATE, MS_REC, MS_SHARED, mount, umount
from tests.conformance.cri import framework as fw
from tests.conformance.cri.framework import ExecError


@pytest.fixture
def pod(f):
    """BeforeEach: framework.CreatePodSandboxForContainer."""
    return f.pod_for_container()


def _found(items, cid):
    return any(x.id == cid for x in items)


def test_runtime_should_support_creating_container(f, pod):
    cid = f.create_default(*pod, "container-for-create-")
    assert _found(f.list_containers(id=cid), cid), "Container should be created"


def test_runtime_should_support_starting_container(f, pod):
    f.start_running(f.create_default(*pod, "container-for-start-test-"))


def test_runtime_should_support_stopping_container(f, pod):
    cid = f.create_default(*pod, "container-for-stop-test-")
    f.start(cid)
    f.stop_exited(cid)


def _remove_and_check(f, cid):
    f.c.remove_container(cid)
    assert not _found(f.list_containers(id=cid), cid), "Container should be removed"


def test_runtime_should_support_removing_created_container(f, pod):
    _remove_and_check(f, f.create_pause(*pod, "container-for-remove-created-test-"))


def test_runtime_should_support_removing_running_container(f, pod):
    cid = f.create_pause(*pod, "container-for-remove-running-test-")
    f.start(cid)
    _remove_and_check(f, cid)


def test_runtime_should_support_removing_stopped_container(f, pod):
    cid = f.create_pause(*pod, "container-for-remove-stopped-test-")
    f.start(cid)
    f.stop_exited(cid)
    _remove_and_check(f, cid)


def test_runtime_should_support_execsync(f, pod):
    cid = f.create_default(*pod, "container-for-execSync-test-")
    f.start(cid)
    assert f.exec_ok(cid, fw.ECHO_HELLO_CMD) == "hello"


def test_runtime_should_support_execsync_with_timeout(f, pod):
    cid = f.create_default(*pod, "container-for-execSync-timeout-test-")
    f.start(cid)
    with pytest.raises(ExecError):
        f.exec_sync(cid, fw.SLEEP_CMD, timeout=1)
    out, err = f.exec_sync(cid, fw.CHECK_SLEEP_CMD)
    assert err == b"" and out.strip() == b"", f"timed-out exec process should be gone: {out!r}"


def _stats(f, **filt):
    return f.c.list_container_stats(**filt)


def _stat_found(stats, cid):
    return any(s.attributes.id == cid for s in stats)


def test_runtime_should_support_listing_container_stats(f, pod):
    cid = f.create_default(*pod, "container-for-stats-")
    f.start(cid)
    s = f.c.container_stats(cid)
    assert s.attributes.id == cid
    assert "container-for-stats-" in s.attributes.metadata.name
    assert s.cpu.timestamp != 0 and s.memory.timestamp != 0


def test_runtime_should_support_listing_stats_for_started_containers(f, pod):
    cid = f.create_default(*pod, "container-for-stats-")
    f.start(cid)
    assert _stat_found(_stats(f, id=cid), cid)


def test_runtime_should_support_listing_stats_for_started_containers_when_filter_is_nil(f, pod):
    cid = f.create_default(*pod, "container-for-stats-with-nil-filter-")
    f.start(cid)
    assert _stat_found(_stats(f), cid)


def test_runtime_should_support_listing_stats_for_three_created_containers_when_filter_is_nil(f, pod):
    ids = [f.create_default(*pod, "container-for-stats-with-nil-filter-") for _ in range(3)]
    for cid in ids:
        f.start(cid)
    stats = _stats(f)
    assert all(_stat_found(stats, cid) for cid in ids)


def test_runtime_should_support_listing_stats_for_containers_filtered_by_labels(f, pod):
    cid = f.create_default(*pod, "container-for-stats-with-labels-", labels={"foo": "bar"})
    f.start(cid)
    assert _stat_found(_stats(f, label_selector={"foo": "bar"}), cid)
    assert not _stat_found(_stats(f, label_selector={"foo": "baz"}), cid), "Container should be filtered"


# -- "runtime should support adding volume and device" ----------------------------------------------
def _host_path(f, sid) -> str:
    d = tempfile.mkdtemp(prefix="test" + sid[:12])
    f.cleanups.append(lambda: __import__("shutil").rmtree(d, ignore_errors=True))
    Path(d, "testVolume.file").touch()
    return d


def _volume_container(f, pod, prefix, host_path):
    cfg = f.container_config(prefix, command=fw.PAUSE_CMD)
    cfg.mounts.add(host_path=host_path, container_path=host_path, selinux_relabel=True)
    return f.create(*pod, cfg)


def test_runtime_should_support_starting_container_with_volume(f, pod):
    host = _host_path(f, pod[0])
    cid = _volume_container(f, pod, "container-with-volume-test-", host)
    f.start_running(cid)
    assert f.exec_ok(cid, ["ls", "-A", host]) != ""


def test_runtime_should_support_starting_container_with_volume_when_host_path_is_a_symlink(f, pod):
    host = _host_path(f, pod[0])
    link = host + "-symlink"
    os.symlink(host, link)
    f.cleanups.append(lambda: os.unlink(link))
    cid = _volume_container(f, pod, "container-with-symlink-host-path-test-", link)
    f.start_running(cid)
    assert f.exec_ok(cid, ["ls", "-A", link]) != ""


# -- "runtime should support log" --------------------------------------------------------------------
@pytest.fixture
def log_pod(f):
    return f.pod_with_log_directory()


def test_runtime_should_support_starting_container_with_log(f, log_pod):
    cfg = f.container_config("container-with-log-test-", command=fw.LOG_DEFAULT_CMD)
    cfg.log_path = cfg.metadata.name + ".log"
    cid = f.create(*log_pod, cfg)
    f.start(cid)
    f.wait_state(cid, pb.CONTAINER_EXITED)
    f.verify_log(log_pod[1], cfg.log_path, fw.DEFAULT_LOG + "\n", "stdout")


def test_runtime_should_support_reopening_container_log(f, log_pod):
    _, pod = log_pod
    cfg = f.container_config("container-reopen-log-test-", command=fw.LOOP_LOG_DEFAULT_CMD)
    cfg.log_path = cfg.metadata.name + ".log"
    cid = f.create(*log_pod, cfg)
    f.start(cid)
    log = Path(pod.log_directory) / cfg.log_path
    assert fw.eventually(lambda: f.log_messages(pod, cfg.log_path), bool), "container log should be generated"
    old = Path(str(log) + ".new")
    log.rename(old)
    f.c.reopen_container_log(cid)
    assert log.exists(), "new container log file should be created"
    logged = fw.eventually(lambda: f.log_messages(pod, cfg.log_path), bool)
    assert logged, "new container log should be generated"
    n = len(fw.parse_log_file(old))
    for _ in range(5):
        time.sleep(1)
        assert len(fw.parse_log_file(old)) == n, "old container log should not change"


# -- container_linux.go --------------------------------------------------------------------------
def _mount(src, dst, fstype, flags):
    mount(src, dst, fstype, flags)


def _umount(path):
    with contextlib.suppress(OSError):
        umount(path, MNT_DETACH)


def _privileged_pod(f, privileged=True):
    cfg = f.pod_config("create-Privileged-PodSandbox-for-container-")
    cfg.linux.security_context.privileged = privileged
    return f.run_pod(cfg), cfg


def _propagation(f, propagation):
    sid, pod = _privileged_pod(f)
    host = tempfile.mkdtemp(prefix="test" + sid[:12])
    src = os.path.join(host, "mnt")
    point = os.path.join(src, "propagationMnt")
    srcdir = os.path.join(host, "propagationSrcDir")
    os.makedirs(point, 0o700)
    os.makedirs(srcdir, 0o700)
    Path(srcdir, "flagFile").touch()
    _mount(src, src, None, MS_BIND | MS_REC)
    _mount(None, src, None, (MS_PRIVATE if propagation == pb.PROPAGATION_PRIVATE else MS_SHARED) | MS_REC)

    def clear():
        for _ in range(3):
            _umount(point)
        _umount(src)
        with open("/proc/self/mountinfo") as mi:
            left = [line.split()[4] for line in mi if line.split()[4].startswith(host)]
        __import__("shutil").rmtree(host, ignore_errors=True)
        assert not left, f"mounts left under {host}: {left}"
    f.cleanups.append(clear)

    cfg = f.container_config("mount-propagation-test-", command=fw.PAUSE_CMD)
    cfg.linux.security_context.privileged = True
    cfg.mounts.add(host_path=src, container_path=src, propagation=propagation)
    cid = f.create(sid, pod, cfg)
    st = f.c.container_status(cid, verbose=True).status
    assert len(st.mounts) == 1
    m = st.mounts[0]
    assert (m.container_path, m.host_path, m.readonly, m.selinux_relabel) == (src, src, False, False)
    assert m.propagation == propagation
    f.start_running(cid)
    _mount(srcdir, point, None, MS_BIND | MS_REC)
    out = f.exec_ok(cid, ["ls", "-A", point])
    if propagation == pb.PROPAGATION_PRIVATE:
        assert out == ""
    else:
        assert out != ""
    inner = os.path.join(src, "containerMntPoint")
    f.exec_ok(cid, ["sh", "-c", "mkdir -p " + inner])
    f.exec_ok(cid, ["sh", "-c", "mount --bind /etc " + inner])
    f.cleanups.append(lambda: _umount(inner))
    seen = os.listdir(inner)
    if propagation == pb.PROPAGATION_BIDIRECTIONAL:
        assert seen, "the container's mount should show on the host"
    else:
        assert not seen


def test_mount_with_rprivate_should_not_support_propagation(f):
    _propagation(f, pb.PROPAGATION_PRIVATE)


def test_mount_with_rshared_should_support_propagation_from_host_to_container_and_vice_versa(f):
    _propagation(f, pb.PROPAGATION_BIDIRECTIONAL)


def test_mount_with_rslave_should_support_propagation_from_host_to_container(f):
    _propagation(f, pb.PROPAGATION_HOST_TO_CONTAINER)


def test_should_terminate_with_exitcode_137_and_reason_oomkilled(f):
    sid, pod = _privileged_pod(f)
    cfg = f.container_config("OOM-test-", command=["sh", "-c", "dd if=/dev/zero of=/dev/null bs=20M"])
    cfg.linux.resources.memory_limit_in_bytes = 15 * 1024 * 1024
    cfg.linux.resources.memory_swap_limit_in_bytes = 15 * 1024 * 1024
    cid = f.create(sid, pod, cfg)
    f.c.container_status(cid, verbose=True)
    f.start(cid)
    st = f.wait_state(cid, pb.CONTAINER_EXITED)
    # critest writes these two as no-op Expects; the CRI meaning is the point, so check them
    if f.name == "containerd" and st.exit_code == 137 and st.reason == "Error":
        # containerd 1.6 sets OOMKilled only when its TaskOOM event lands before TaskExit; under load the
        # exit wins now and then (seen here at load 4). Ours reads the memory cgroup's oom_kill count at exit.
        pytest.xfail("containerd 1.6: the OOM event raced the exit event (reason Error)")
    assert st.exit_code == 137 and st.reason == "OOMKilled", (st.exit_code, st.reason)


def _supports_rro(f) -> bool:
    st = f.c.status()
    return any(h.name == "" and h.features.recursive_read_only_mounts for h in st.runtime_handlers)


def _rro_host_path(f, sid):
    host = tempfile.mkdtemp(prefix="test" + sid[:12])
    tmpfs = os.path.join(host, "tmpfs")
    os.makedirs(tmpfs, 0o700)
    _mount("none", tmpfs, "tmpfs", 0)

    def clear():
        _umount(tmpfs)
        __import__("shutil").rmtree(host, ignore_errors=True)
    f.cleanups.append(clear)
    return host


def _rro(f, rro):
    if rro and not _supports_rro(f):
        pytest.skip("runtime does not implement recursive readonly mounts")
    sid, pod = _privileged_pod(f)
    host = _rro_host_path(f, sid)
    cfg = f.container_config("container-with-rro-", command=fw.PAUSE_CMD)
    cfg.mounts.add(host_path=host, container_path="/mnt", readonly=True, recursive_read_only=rro,
                   selinux_relabel=True)
    cid = f.create(sid, pod, cfg)
    f.start_running(cid)
    if rro:
        f.exec_ok(cid, ["sh", "-c", 'touch /mnt/tmpfs/foo 2>&1 | grep -q "Read-only file system"'])
    else:
        f.exec_ok(cid, ["touch", "/mnt/tmpfs/file"])


def test_should_support_non_recursive_readonly_mounts(f):
    _rro(f, False)


def test_should_support_recursive_readonly_mounts(f):
    _rro(f, True)


def _rro_rejected(f, readonly=True, propagation=pb.PROPAGATION_PRIVATE):
    if not _supports_rro(f):
        pytest.skip("runtime does not implement recursive readonly mounts")
    sid, pod = _privileged_pod(f)
    host = _rro_host_path(f, sid)
    cfg = f.container_config("container-with-bad-rro-", command=fw.PAUSE_CMD)
    cfg.mounts.add(host_path=host, container_path="/mnt", readonly=readonly, recursive_read_only=True,
                   selinux_relabel=True, propagation=propagation)
    with pytest.raises(grpc.RpcError):
        f.create(sid, pod, cfg)


def test_should_reject_a_recursive_readonly_mount_with_propagation_host_to_container(f):
    _rro_rejected(f, propagation=pb.PROPAGATION_HOST_TO_CONTAINER)


def test_should_reject_a_recursive_readonly_mount_with_propagation_bidirectional(f):
    _rro_rejected(f, propagation=pb.PROPAGATION_BIDIRECTIONAL)


def test_should_reject_a_recursive_readonly_mount_with_readonly_false(f):
    _rro_rejected(f, readonly=False)


