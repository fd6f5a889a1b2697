"""The kubelet's own admission (os, sysctls) and activeDeadlineSeconds."""

import pytest

from nodeagent.api.times import rfc3339
from nodeagent.kubelet import admission


def _pod(labels=None, **spec):
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": labels or {}},
            "spec": {"containers": [{"name": "c", "image": "i"}], **spec}}


def _sysctls(*names, **spec):
    return _pod(securityContext={"sysctls": [{"name": n, "value": "1"} for n in names]}, **spec)


@pytest.mark.parametrize(("pod", "reason", "message"), [
    (_pod(), None, None),
    (_pod(os={"name": "linux"}), None, None),
    (_pod(os={"name": "windows"}), "PodOSNotSupported",
     "Failed to admit pod as the OS field doesn't match node OS"),
    (_pod({"kubernetes.io/os": "windows"}), "PodOSSelectorNodeLabelDoesNotMatch",
     "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"),
    (_sysctls("net.ipv4.ip_local_port_range", "kernel.shm_rmid_forced"), None, None),
    (_sysctls("net/ipv4/tcp_syncookies"), None, None),  # the slash form is the same sysctl
    (_sysctls("net.core.somaxconn"), "SysctlForbidden",
     'forbidden sysctl: "net.core.somaxconn" not allowlisted'),
    (_sysctls("kernel.msgmax"), "SysctlForbidden", 'forbidden sysctl: "kernel.msgmax" not allowlisted'),
    (_sysctls("net.ipv4.tcp_syncookies", hostNetwork=True), "SysctlForbidden",
     'forbidden sysctl: "net.ipv4.tcp_syncookies" not allowed with host net enabled'),
    (_sysctls("kernel.shm_rmid_forced", hostIPC=True), "SysctlForbidden",
     'forbidden sysctl: "kernel.shm_rmid_forced" not allowed with host ipc enabled'),
])
def test_admit(pod, reason, message):
    r = admission.admit(pod)
    if reason is None:
        assert r is None
    else:
        assert r is not None and (r.reason, r.message) == (reason, message)
        assert r.status() == {"phase": "Failed", "reason": reason, "message": f"Pod was rejected: {message}"}


def test_allowed_unsafe_sysctls_by_name_and_prefix():
    assert admission.admit(_sysctls("net.core.somaxconn"), ["net.core.*"]) is None
    assert admission.admit(_sysctls("kernel.msgmax"), ["kernel.msgmax"]) is None
    assert admission.admit(_sysctls("kernel.msgmax"), ["net.*"]) is not None


def test_deadline_counts_from_start_time():
    pod = _pod(activeDeadlineSeconds=10)
    status = {"startTime": rfc3339(1000.0)}
    assert not admission.deadline_exceeded(pod, status, 1009.0)
    assert admission.deadline_exceeded(pod, status, 1010.0)
    assert not admission.deadline_exceeded(_pod(), status, 99999.0)
    assert not admission.deadline_exceeded(pod, {}, 99999.0)  # not started
    assert admission.deadline_status() == {"phase": "Failed", "reason": "DeadlineExceeded",
                                           "message": "Pod was active on the node longer than the specified "
                                           "deadline"}
