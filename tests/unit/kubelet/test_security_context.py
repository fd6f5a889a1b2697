"""securityContext → CRI security contexts, and runAsNonRoot, as the kubelet maps and checks them."""

import pytest

from cri.proto import api_pb2 as pb
from nodeagent.kubelet import security_context as sc


def _pod(psc=None, csc=None, **spec):
    c = {"name": "c", "image": "busybox"}
    if csc is not None:
        c["securityContext"] = csc
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": {"securityContext": psc or {}, "containers": [c], **spec}}


def _lsc(pod):
    lsc = pb.LinuxContainerSecurityContext()
    sc.apply_container(pod, pod["spec"]["containers"][0], lsc, seccomp_root="/var/lib/kubelet/seccomp")
    return lsc


def test_the_container_overrides_the_pod_field_by_field():
    pod = _pod({"runAsUser": 1000, "runAsGroup": 2000, "runAsNonRoot": True}, {"runAsUser": 1001})
    lsc = _lsc(pod)
    assert lsc.run_as_user.value == 1001 and lsc.run_as_group.value == 2000
    assert sc.effective(pod, pod["spec"]["containers"][0])["runAsNonRoot"] is True


def test_unset_ids_stay_unset_so_the_image_user_applies():
    lsc = _lsc(_pod())
    assert not lsc.HasField("run_as_user") and not lsc.HasField("run_as_group")
    assert not lsc.no_new_privs and not lsc.readonly_rootfs and not lsc.privileged
    assert lsc.seccomp.profile_type == pb.SecurityProfile.Unconfined  # kubelet without --seccomp-default
    assert list(lsc.masked_paths) == list(sc.DEFAULT_MASKED_PATHS)


@pytest.mark.parametrize(("csc", "check"), [
    ({"allowPrivilegeEscalation": False}, lambda lsc: lsc.no_new_privs),
    ({"allowPrivilegeEscalation": True}, lambda lsc: not lsc.no_new_privs),
    ({"readOnlyRootFilesystem": True}, lambda lsc: lsc.readonly_rootfs),
    ({"privileged": True}, lambda lsc: lsc.privileged and not lsc.masked_paths),
    ({"procMount": "Unmasked"}, lambda lsc: not lsc.masked_paths and not lsc.readonly_paths),
    ({"capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}},
     lambda lsc: list(lsc.capabilities.add_capabilities) == ["NET_ADMIN"]
     and list(lsc.capabilities.drop_capabilities) == ["ALL"]),
    ({"seccompProfile": {"type": "RuntimeDefault"}},
     lambda lsc: lsc.seccomp.profile_type == pb.SecurityProfile.RuntimeDefault),
    ({"seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/audit.json"}},
     lambda lsc: lsc.seccomp.profile_type == pb.SecurityProfile.Localhost
     and lsc.seccomp.localhost_ref == "/var/lib/kubelet/seccomp/profiles/audit.json"),
    ({"appArmorProfile": {"type": "Localhost", "localhostProfile": "k8s-deny-write"}},
     lambda lsc: lsc.apparmor.profile_type == pb.SecurityProfile.Localhost
     and lsc.apparmor.localhost_ref == "k8s-deny-write"),
    ({"appArmorProfile": {"type": "Unconfined"}},
     lambda lsc: lsc.apparmor.profile_type == pb.SecurityProfile.Unconfined),
    ({"seLinuxOptions": {"level": "s0:c1,c2"}}, lambda lsc: lsc.selinux_options.level == "s0:c1,c2"),
])
def test_container_fields_reach_the_cri_context(csc, check):
    assert check(_lsc(_pod(csc=csc)))


def test_supplemental_groups_then_fs_group_and_the_policy():
    pod = _pod({"supplementalGroups": [5, 6], "fsGroup": 7, "supplementalGroupsPolicy": "Strict"})
    lsc = _lsc(pod)
    assert list(lsc.supplemental_groups) == [5, 6, 7]
    assert lsc.supplemental_groups_policy == pb.Strict
    assert _lsc(_pod({"fsGroup": 5, "supplementalGroups": [5]})).supplemental_groups == [5]
    assert _lsc(_pod()).supplemental_groups_policy == pb.Merge


def test_sandbox_gets_pod_identity_sysctls_and_privileged():
    pod = _pod({"runAsUser": 1000, "fsGroup": 3000, "sysctls": [
        {"name": "net/ipv4/tcp_syncookies", "value": "1"}, {"name": "kernel.shm_rmid_forced", "value": "0"}]},
        {"privileged": True})
    cfg = pb.PodSandboxConfig()
    sc.apply_sandbox(pod, cfg)
    ssc = cfg.linux.security_context
    assert ssc.run_as_user.value == 1000 and list(ssc.supplemental_groups) == [3000] and ssc.privileged
    assert dict(cfg.linux.sysctls) == {"net.ipv4.tcp_syncookies": "1", "kernel.shm_rmid_forced": "0"}


@pytest.mark.parametrize(("psc", "csc", "uid", "user", "error"), [
    ({}, None, 0, "", None),  # no runAsNonRoot: anything goes
    ({"runAsNonRoot": True}, None, 1000, "", None),
    ({"runAsNonRoot": True}, None, 0, "", "container has runAsNonRoot and image will run as root"),
    ({"runAsNonRoot": True}, None, None, "nobody",
     "container has runAsNonRoot and image has non-numeric user (nobody), cannot verify user is non-root"),
    ({"runAsNonRoot": True}, {"runAsUser": 0}, 1000, "", "container's runAsUser breaks non-root policy"),
    ({"runAsNonRoot": True, "runAsUser": 1000}, None, 0, "", None),  # runAsUser wins over the image
    ({"runAsNonRoot": True}, {"runAsNonRoot": False}, 0, "", None),
])
def test_run_as_non_root(psc, csc, uid, user, error):
    pod = _pod(psc, csc)
    if error is None:
        sc.verify_run_as_non_root(pod, pod["spec"]["containers"][0], uid, user)
        return
    with pytest.raises(sc.ConfigError) as e:
        sc.verify_run_as_non_root(pod, pod["spec"]["containers"][0], uid, user)
    assert str(e.value).startswith(error)
    assert str(e.value).endswith('(pod: "p_ns(u1)", container: c)')
