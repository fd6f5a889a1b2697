"""critest security_context_linux.go: "Security Context" (NamespaceOption, bucket, seccomp, NoNewPrivs)
and apparmor_linux.go (skipped where the kernel has no AppArmor, per the capability probe)."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import grpc
import pytest

from cri.proto import api_pb2 as pb
from kernel.probe import probe_host
from tests.conformance.cri import framework as fw
from tests.conformance.cri.framework import ExecError


def _ns_pod(f, pid=pb.POD, ipc=pb.POD, net=pb.POD, log_dir=""):
    cfg = f.pod_config("NamespaceOption-PodSandbox-", log_dir=log_dir)
    nso = cfg.linux.security_context.namespace_options
    nso.pid, nso.ipc, nso.network = pid, ipc, net
    return f.run_pod(cfg), cfg


def _ns_container(f, sid, pod, prefix, image, command=None, log_path=""):
    cfg = f.container_config(prefix, image=image, command=command or [])
    cfg.log_path = log_path
    cfg.linux.security_context.namespace_options.CopyFrom(pod.linux.security_context.namespace_options)
    cid = f.create(sid, pod, cfg)
    f.start_running(cid)
    return cid


def test_runtime_should_support_hostpid(f):
    sid, pod = _ns_pod(f, pid=pb.NODE)
    nginx = _ns_container(f, sid, pod, "nginx-container-", fw.WEBSERVER)
    pid = fw.eventually(lambda: f.exec_ok(nginx, ["cat", "/var/run/nginx.pid"]).strip(), bool, 30)
    bb = _ns_container(f, sid, pod, "container-with-HostPID-test-", fw.BUSYBOX, ["sh", "-c", "sleep 1000"])
    pids = f.exec_ok(bb, ["sh", "-c", "pidof nginx || true"]).split()
    assert pid in pids, "nginx's pid should be seen by hostpid containers"


def _shm_segment(f) -> str:
    out = subprocess.run(["ipcmk", "-M", "1048576"], capture_output=True, text=True, check=True).stdout
    seg = out.strip().split(":")[-1].strip()
    f.cleanups.append(lambda: subprocess.run(["ipcrm", "-m", seg], capture_output=True, check=False))
    return seg


def test_runtime_should_support_hostipc_is_true(f):
    seg = _shm_segment(f)
    sid, pod = _ns_pod(f, ipc=pb.NODE)
    cid = _ns_container(f, sid, pod, "namespace-container-", fw.BUSYBOX, fw.PAUSE_CMD)
    assert seg in f.exec_ok(cid, ["ipcs", "-m"])


def test_runtime_should_support_hostipc_is_false(f):
    seg = _shm_segment(f)
    sid, pod = _ns_pod(f)
    cid = _ns_container(f, sid, pod, "namespace-container-", fw.BUSYBOX, fw.PAUSE_CMD)
    assert seg not in f.exec_ok(cid, ["ipcs", "-m"]).split()


def test_runtime_should_support_podpid(f):
    sid, pod = _ns_pod(f, pid=pb.POD)
    cid = _ns_container(f, sid, pod, "nginx-container-", fw.WEBSERVER)
    assert "master process" not in f.exec_ok(cid, ["cat", "/proc/1/cmdline"])


def test_runtime_should_support_containerpid(f):
    sid, pod = _ns_pod(f, pid=pb.CONTAINER)
    cid = _ns_container(f, sid, pod, "nginx-container-", fw.WEBSERVER)
    assert "master process" in f.exec_ok(cid, ["cat", "/proc/1/cmdline"])


def _host_network(f, host_network):
    srv = socket.socket()
    srv.bind(("0.0.0.0", 0))
    srv.listen(8)
    f.cleanups.append(srv.close)
    port = srv.getsockname()[1]
    name = "NamespaceOption-PodSandbox-" + fw.new_uuid()
    sid, pod = _ns_pod(f, net=pb.NODE if host_network else pb.POD, log_dir=f.log_dir(name))
    log = "container-with-HostNetwork-test.log"
    _ns_container_no_wait(f, sid, pod, log)

    def seen():
        return any(f":{port}" in m.log for m in f.log_messages(pod, log))
    assert seen() == host_network, f"host port {port} in the container's list: {seen()}"


def _ns_container_no_wait(f, sid, pod, log):
    cfg = f.container_config("container-with-HostNetwork-test-", command=["sh", "-c", "netstat -ln"])
    cfg.log_path = log
    cfg.linux.security_context.namespace_options.CopyFrom(pod.linux.security_context.namespace_options)
    cid = f.create(sid, pod, cfg)
    f.start(cid)
    f.wait_state(cid, pb.CONTAINER_EXITED)


def test_runtime_should_support_hostnetwork_is_true(f):
    _host_network(f, True)


def test_runtime_should_support_hostnetwork_is_false(f):
    _host_network(f, False)


# -- bucket ---------------------------------------------------------------------------------------
def _sec_container(f, prefix, command=None, **sec):
    sid, pod = f.pod_for_container()
    cfg = f.container_config(prefix, command=command or fw.PAUSE_CMD)
    for k, v in sec.items():
        field = getattr(cfg.linux.security_context, k)
        if hasattr(field, "value") and not isinstance(v, bool):
            field.value = v
        elif isinstance(v, list):
            field.extend(v)
        else:
            setattr(cfg.linux.security_context, k, v)
    return sid, pod, cfg


def test_runtime_should_support_supplementalgroups(f):
    sid, pod, cfg = _sec_container(f, "container-with-SupplementalGroups-test-",
                                   supplemental_groups=[1234, 5678])
    cid = f.create(sid, pod, cfg)
    f.start_running(cid)
    groups = f.exec_ok(cid, ["id", "-G"]).split()
    assert "1234" in groups and "5678" in groups


def test_runtime_should_support_runasuser(f):
    sid, pod, cfg = _sec_container(f, "container-with-RunAsUser-test-", run_as_user=1001)
    cid = f.create(sid, pod, cfg)
    f.start_running(cid)
    assert f.exec_ok(cid, ["id", "-u"]) == "1001\n"


def test_runtime_should_support_runasusername(f):
    sid, pod, cfg = _sec_container(f, "container-with-RunAsUserName-test-", run_as_username="nobody")
    cid = f.create(sid, pod, cfg)
    f.start_running(cid)
    assert f.exec_ok(cid, ["id", "-nu"]) == "nobody\n"


def _logged(f, prefix, command, **sec):
    sid, pod = f.pod_with_log_directory()
    cfg = f.container_config(prefix, command=command)
    cfg.log_path = cfg.metadata.name + ".log"
    for k, v in sec.items():
        field = getattr(cfg.linux.security_context, k)
        if hasattr(field, "value") and not isinstance(v, bool):
            field.value = v
        else:
            setattr(cfg.linux.security_context, k, v)
    cid = f.create(sid, pod, cfg)
    f.start(cid)
    f.wait_state(cid, pb.CONTAINER_EXITED)
    return pod, cfg.log_path


def test_runtime_should_support_runasgroup(f):
    pod, log = _logged(f, "container-with-RunAsGroup-test-", ["sh", "-c", "echo $(id -u):$(id -g)"],
                       run_as_user=1001, run_as_group=1002)
    f.verify_log(pod, log, "1001:1002\n", "stdout")


def test_runtime_should_return_error_if_runasgroup_is_set_without_runasuser(f):
    sid, pod, cfg = _sec_container(f, "container-with-RunAsGroup-without-RunAsUser-test-",
                                   ["sh", "-c", "echo $(id -u):$(id -g)"], run_as_group=1002)
    with pytest.raises(grpc.RpcError):
        f.create(sid, pod, cfg)


def test_runtime_should_support_that_readonlyrootfs_is_false(f):
    pod, log = _logged(f, "container-with-ReadOnlyRootfs-false-test-",
                       ["sh", "-c", "touch test.go && [ -f test.go ] && echo 'Found'"], readonly_rootfs=False)
    f.verify_log(pod, log, "Found\n", "stdout")


def test_runtime_should_support_that_readonlyrootfs_is_true(f):
    pod, log = _logged(f, "container-with-ReadOnlyRootfs-true-test-",
                       ["sh", "-c", "touch test.go && [ -f test.go ] && echo 'Found'"], readonly_rootfs=True)
    f.verify_log(pod, log, "touch: test.go: Read-only file system\n", "stderr")


def _net_admin(f, cid, manageable):
    try:
        f.exec_sync(cid, ["brctl", "addbr", "foobar"])
        ok = True
    except ExecError:
        ok = False
    assert ok == manageable


def _privileged(f, privileged):
    cfg = f.pod_config("create-Privileged-PodSandbox-for-container-")
    cfg.linux.security_context.privileged = privileged
    sid = f.run_pod(cfg)
    c = f.container_config("container-with-isPrivileged-test-", command=fw.PAUSE_CMD)
    c.linux.security_context.privileged = privileged
    cid = f.create(sid, cfg, c)
    f.start_running(cid)
    _net_admin(f, cid, privileged)


def test_runtime_should_support_privileged_is_true(f):
    _privileged(f, True)


def test_runtime_should_support_privileged_is_false(f):
    _privileged(f, False)


def test_runtime_should_support_setting_capability(f):
    sid, pod = f.pod_for_container()
    cfg = f.container_config("container-with-Capability-test-", command=fw.PAUSE_CMD)
    cfg.linux.security_context.capabilities.add_capabilities.append("NET_ADMIN")
    cid = f.create(sid, pod, cfg)
    f.start_running(cid)
    _net_admin(f, cid, True)
    cid = f.create_default(sid, pod, "container-with-notCapability-test-")
    f.start_running(cid)
    _net_admin(f, cid, False)


def test_runtime_should_support_maskedpaths(f):
    sid, pod, cfg = _sec_container(f, "container-with-maskedpaths", masked_paths=["/bin/ls"])
    cid = f.create(sid, pod, cfg)
    f.start_running(cid)
    # critest runs `sh -c ls`; Debian's busybox-static shell runs its ls applet without exec'ing
    # /bin/ls (standalone shell), so name the file to make the shell exec the masked path
    with pytest.raises(ExecError) as e:
        f.exec_sync(cid, ["/bin/sh", "-c", "/bin/ls"])
    assert e.value.stderr == b"/bin/sh: /bin/ls: Permission denied\n"


def test_runtime_should_support_readonlypaths(f):
    sid, pod, cfg = _sec_container(f, "container-with-readonlypaths", readonly_paths=["/tmp"])
    cid = f.create(sid, pod, cfg)
    f.start_running(cid)
    with pytest.raises(ExecError) as e:
        f.exec_sync(cid, ["touch", "/tmp/test"])
    assert e.value.stderr == b"touch: /tmp/test: Read-only file system\n"


# -- seccomp (SecurityProfile) -------------------------------------------------------------------
BLOCK_HOSTNAME = ('{"defaultAction": "SCMP_ACT_ALLOW", '
                  '"syscalls": [{"names": ["sethostname"], "action": "SCMP_ACT_ERRNO"}]}')
BLOCK_CHMOD = ('{"defaultAction": "SCMP_ACT_ALLOW", '
               '"syscalls": [{"names": ["chmod", "fchmodat"], "action": "SCMP_ACT_ERRNO"}]}')


def _need_seccomp():
    r = probe_host()
    if not r.has("seccomp"):
        pytest.skip(r.why_not("seccomp"))


def _profile(f, text) -> str:
    p = Path(f.tmp) / f"profile-{fw.new_uuid()}.json"
    p.write_text(text)
    return str(p)


def _seccomp(f, kind, localhost="", caps=(), privileged=False, command=None):
    _need_seccomp()
    cfg = f.pod_config("seccomp-sandbox-")
    cfg.linux.security_context.privileged = privileged
    sid = f.run_pod(cfg)
    c = f.container_config("seccomp-container-", command=command or fw.PAUSE_CMD)
    sec = c.linux.security_context
    sec.seccomp.profile_type = kind
    sec.seccomp.localhost_ref = localhost
    sec.privileged = privileged
    sec.capabilities.add_capabilities.extend(caps)
    cid = f.create(sid, cfg, c)
    f.start_running(cid)
    return cid


def _verify(f, cid, cmd, expect_error, output):
    if expect_error:
        with pytest.raises(ExecError) as e:
            f.exec_sync(cid, cmd)
        assert output in e.value.stderr.decode()
    else:
        out, _ = f.exec_sync(cid, cmd)
        assert output in out.decode()


def test_should_support_seccomp_unconfined_on_the_container(f):
    cid = _seccomp(f, pb.SecurityProfile.Unconfined)
    _verify(f, cid, ["grep", "ecc", "/proc/self/status"], False, "0")


def test_should_support_seccomp_localhost_profile_on_the_container(f):
    cid = _seccomp(f, pb.SecurityProfile.Localhost, _profile(f, BLOCK_CHMOD))
    _verify(f, cid, ["chmod", "400", "/"], True, "Operation not permitted")


def test_should_support_seccomp_default_which_is_unconfined_on_the_container(f):
    _need_seccomp()
    sid, pod = f.pod_for_container()
    cid = f.create(sid, pod, f.container_config("seccomp-default-", command=fw.PAUSE_CMD))
    f.start_running(cid)
    _verify(f, cid, ["grep", "ecc", "/proc/self/status"], False, "0")


def _check_set_hostname(f, cid, ok):
    try:
        f.exec_sync(cid, ["hostname", "ANewHostName"])
        worked = True
    except ExecError:
        worked = False
    assert worked == ok


def test_runtime_should_not_block_setting_host_name_with_unconfined_seccomp_and_sys_admin(f):
    cid = _seccomp(f, pb.SecurityProfile.Unconfined, caps=["SYS_ADMIN"], command=["sleep", "60"])
    _check_set_hostname(f, cid, True)


def test_runtime_should_support_an_seccomp_profile_that_blocks_setting_hostname_with_sys_admin(f):
    cid = _seccomp(f, pb.SecurityProfile.Localhost, _profile(f, BLOCK_HOSTNAME), ["SYS_ADMIN"],
                   command=["sleep", "60"])
    _check_set_hostname(f, cid, False)


def test_runtime_should_not_support_a_custom_seccomp_profile_without_using_localhost_as_a_prefix(f):
    _need_seccomp()
    sid, pod = f.pod_for_container()
    c = f.container_config("container-with-block-hostname-seccomp-profile-test-", command=["sleep", "60"])
    c.linux.security_context.seccomp_profile_path = _profile(f, BLOCK_HOSTNAME)
    with pytest.raises(grpc.RpcError):
        f.create(sid, pod, c)


def test_runtime_should_ignore_a_seccomp_profile_that_blocks_setting_hostname_when_privileged(f):
    cid = _seccomp(f, pb.SecurityProfile.Localhost, _profile(f, BLOCK_HOSTNAME), privileged=True,
                   command=["sleep", "60"])
    _check_set_hostname(f, cid, True)


def test_should_support_seccomp_runtime_default_on_the_container(f):
    cid = _seccomp(f, pb.SecurityProfile.RuntimeDefault)
    _verify(f, cid, ["grep", "ecc", "/proc/self/status"], False, "2")


def test_runtime_should_support_setting_hostname_with_runtime_default_seccomp_profile_and_sys_admin(f):
    cid = _seccomp(f, pb.SecurityProfile.RuntimeDefault, caps=["SYS_ADMIN"], command=["sleep", "60"])
    _check_set_hostname(f, cid, True)


def test_runtime_should_block_sethostname_with_runtime_default_seccomp_profile_and_no_extra_caps(f):
    cid = _seccomp(f, pb.SecurityProfile.RuntimeDefault, command=["sleep", "60"])
    _check_set_hostname(f, cid, False)


# -- NoNewPrivs ----------------------------------------------------------------------------------
def _nnp(f, no_new_privs, want):
    sid, pod = f.pod_with_log_directory()
    cfg = f.container_config("alpine-nnp-", image=fw.NONEWPRIVS)
    cfg.log_path = cfg.metadata.name + ".log"
    cfg.linux.security_context.no_new_privs = no_new_privs
    cfg.linux.security_context.run_as_user.value = 1000
    cid = f.create(sid, pod, cfg)
    f.start(cid)
    f.wait_state(cid, pb.CONTAINER_EXITED)
    f.verify_log(pod, cfg.log_path, want, "stdout")


def test_should_not_allow_privilege_escalation_when_true(f):
    _nnp(f, True, "Effective uid: 1000\n")


def test_should_allow_privilege_escalation_when_false(f):
    _nnp(f, False, "Effective uid: 0\n")


# -- apparmor_linux.go ------------------------------------------------------------------------------
# critest loads two test profiles (apparmor_parser -r) and runs `touch /tmp/foo` under each: writes
# denied (the container must exit non-zero), writes only audited (it must exit 0); a profile the
# kernel does not have must fail CreateContainer. Current critest runs each spec three ways: the
# deprecated apparmor_profile string, the typed apparmor field, and both at once with the string
# naming an unloaded profile (the typed field must win). Our profiles get a unique suffix, and are
# unloaded again (apparmor_parser -R) when the spec ends.
APPARMOR_TEST_PROFILES = """
#include <tunables/global>
profile {deny} flags=(attach_disconnected) {{
  #include <abstractions/base>
  file,
  deny /** w,  # no file may be written
}}
profile {audit} flags=(attach_disconnected) {{
  #include <abstractions/base>
  file,
  audit /** w,  # writes are allowed, and logged
}}
"""
UNLOADED_PROFILE = "non-existent-profile"


@pytest.fixture
def apparmor_profiles(f):
    """critest's loadTestProfiles: the deny-write and audit-write profiles, loaded for this spec."""
    from cri.runtime.apparmor import parser
    from tests.harness.resources import unique

    r = probe_host()
    if not r.has("apparmor"):
        pytest.skip(r.why_not("apparmor"))
    exe = parser()
    if exe is None:
        pytest.fail("the kernel has AppArmor but apparmor_parser is missing: make install installs Debian's "
                    "apparmor package on such hosts")
    suffix = unique("aa")
    names = {"deny": "cri-validate-apparmor-test-deny-write-" + suffix,
             "audit": "cri-validate-apparmor-test-audit-write-" + suffix}
    text = APPARMOR_TEST_PROFILES.format(**names)
    p = subprocess.run([exe, "-r", "-K"], input=text, capture_output=True, text=True, check=False)
    # apparmor_parser does not always exit non-zero: like critest, any stderr is an error
    assert p.returncode == 0 and not p.stderr, f"apparmor_parser -r: {p.returncode} {p.stderr}"
    unload = [exe, "-R"]
    f.cleanups.append(lambda: subprocess.run(unload, input=text, capture_output=True, text=True, check=False))
    return names


def _set_apparmor(sec: pb.LinuxContainerSecurityContext, field: str, profile: str) -> None:
    ref = "localhost/" + profile
    if field == "apparmor_profile":
        sec.apparmor_profile = ref
        return
    sec.apparmor.profile_type = pb.SecurityProfile.Localhost
    sec.apparmor.localhost_ref = ref  # critest sends the prefix here too
    if field == "both":
        sec.apparmor_profile = "localhost/" + UNLOADED_PROFILE


def _apparmor_container(f, field: str, profile: str, should_succeed: bool) -> pb.ContainerStatus | None:
    """critest's createContainerWithAppArmor: `touch /tmp/foo` under the profile, run to its exit."""
    sid, pod = f.pod_for_container()
    cfg = f.container_config("apparmor-test-", command=["touch", "/tmp/foo"])
    _set_apparmor(cfg.linux.security_context, field, profile)
    if not should_succeed:
        with pytest.raises(grpc.RpcError):
            f.create(sid, pod, cfg)
        left = [c.id for c in f.list_containers(pod_sandbox_id=sid)]
        assert not left, f"a refused CreateContainer left containers behind: {left}"
        return None
    cid = f.create(sid, pod, cfg)
    f.start(cid)
    return f.wait_state(cid, pb.CONTAINER_EXITED)


FIELDS = ("apparmor_profile", "apparmor", "both")


@pytest.mark.parametrize("field", FIELDS)
def test_should_fail_with_an_unloaded_profile(f, apparmor_profiles, field):
    _apparmor_container(f, field, UNLOADED_PROFILE, False)


@pytest.mark.parametrize("field", FIELDS)
def test_should_enforce_a_profile_blocking_writes(f, apparmor_profiles, field):
    st = _apparmor_container(f, field, apparmor_profiles["deny"], True)
    assert st is not None
    assert st.exit_code != 0, "touch /tmp/foo succeeded under a profile denying writes"


@pytest.mark.parametrize("field", FIELDS)
def test_should_enforce_a_permissive_profile(f, apparmor_profiles, field):
    st = _apparmor_container(f, field, apparmor_profiles["audit"], True)
    assert st is not None
    assert st.exit_code == 0, f"touch /tmp/foo failed under a profile that only audits writes: {st.exit_code}"
