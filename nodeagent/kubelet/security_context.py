"""A pod's and a container's securityContext as CRI security contexts (kubelet's security_context.go and
kuberuntime_container_linux.go), and the runAsNonRoot check the kubelet makes before CreateContainer.

Pure: the pod spec in, CRI messages filled in place. The container's effective context is the pod's
(runAsUser, runAsGroup, runAsNonRoot, seccompProfile, appArmorProfile, seLinuxOptions) overridden field by
field by the container's own; privileged, capabilities, readOnlyRootFilesystem, allowPrivilegeEscalation and
procMount exist only on the container.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from cri.proto import api_pb2 as pb
from nodeagent.kubelet.admission import sysctl_dots

# Where the kubelet looks for Localhost seccomp profiles (--seccomp-profile-root's default, kubelet root).
SECCOMP_ROOT = "/var/lib/kubelet/seccomp"

# The kubelet's default masked and read-only paths (securitycontext.ConvertToRuntimeMaskedPaths).
DEFAULT_MASKED_PATHS = ("/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                        "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
                        "/sys/firmware", "/sys/devices/virtual/powercap")
DEFAULT_READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")

_POD_INHERITED = ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile", "appArmorProfile",
                  "seLinuxOptions")


class ConfigError(Exception):
    """A container the kubelet will not create (CreateContainerConfigError, with this message)."""


def effective(pod: Mapping[str, Any], c: Mapping[str, Any]) -> dict[str, Any]:
    """DetermineEffectiveSecurityContext: the pod's inheritable fields, overridden by the container's."""
    psc = (pod.get("spec") or {}).get("securityContext") or {}
    out = {k: psc[k] for k in _POD_INHERITED if psc.get(k) is not None}
    out.update({k: v for k, v in (c.get("securityContext") or {}).items() if v is not None})
    return out


def pod_format(pod: Mapping[str, Any]) -> str:
    """format.Pod: name_namespace(uid), as the kubelet names a pod in its messages."""
    m = pod.get("metadata") or {}
    return f"{m.get('name', '')}_{m.get('namespace', '')}({m.get('uid', '')})"


def verify_run_as_non_root(pod: Mapping[str, Any], c: Mapping[str, Any], image_uid: int | None,
                           image_user: str) -> None:
    """kubelet verifyRunAsNonRoot: refuse a container that would run as root under runAsNonRoot (the
    image's user decides when runAsUser is unset; a non-numeric image user cannot be verified)."""
    sc = effective(pod, c)
    if not sc.get("runAsNonRoot"):
        return
    who = f'(pod: "{pod_format(pod)}", container: {c.get("name", "")})'
    if sc.get("runAsUser") is not None:
        if int(sc["runAsUser"]) == 0:
            raise ConfigError(f"container's runAsUser breaks non-root policy {who}")
        return
    if image_uid is not None and image_uid == 0:
        raise ConfigError(f"container has runAsNonRoot and image will run as root {who}")
    if image_uid is None and image_user:
        raise ConfigError(f"container has runAsNonRoot and image has non-numeric user ({image_user}), "
                          f"cannot verify user is non-root {who}")


def _profile(p: Mapping[str, Any] | None, localhost_root: str) -> pb.SecurityProfile | None:
    if not p:
        return None
    kind = p.get("type")
    if kind == "RuntimeDefault":
        return pb.SecurityProfile(profile_type=pb.SecurityProfile.RuntimeDefault)
    if kind == "Unconfined":
        return pb.SecurityProfile(profile_type=pb.SecurityProfile.Unconfined)
    if kind == "Localhost":
        ref = p.get("localhostProfile") or ""
        return pb.SecurityProfile(profile_type=pb.SecurityProfile.Localhost,
                                  localhost_ref=os.path.join(localhost_root, ref) if localhost_root else ref)
    return None


def supplemental_groups(pod: Mapping[str, Any]) -> list[int]:
    """The pod's supplementalGroups, then fsGroup (the kubelet adds it so the volumes it owns are usable)."""
    psc = (pod.get("spec") or {}).get("securityContext") or {}
    groups = [int(g) for g in psc.get("supplementalGroups") or []]
    if psc.get("fsGroup") is not None and int(psc["fsGroup"]) not in groups:
        groups.append(int(psc["fsGroup"]))
    return groups


def _groups_policy(pod: Mapping[str, Any]) -> int:
    psc = (pod.get("spec") or {}).get("securityContext") or {}
    return pb.Strict if psc.get("supplementalGroupsPolicy") == "Strict" else pb.Merge


def apply_container(pod: Mapping[str, Any], c: Mapping[str, Any], lsc: pb.LinuxContainerSecurityContext,
                    seccomp_root: str = SECCOMP_ROOT) -> None:
    """Fill a container's CRI security context from its effective securityContext."""
    sc = effective(pod, c)
    lsc.privileged = bool(sc.get("privileged"))
    if sc.get("runAsUser") is not None:
        lsc.run_as_user.value = int(sc["runAsUser"])
    if sc.get("runAsGroup") is not None:
        lsc.run_as_group.value = int(sc["runAsGroup"])
    lsc.readonly_rootfs = bool(sc.get("readOnlyRootFilesystem"))
    # AddNoNewPrivileges: only an explicit allowPrivilegeEscalation: false sets no_new_privs.
    lsc.no_new_privs = sc.get("allowPrivilegeEscalation") is False
    caps = sc.get("capabilities") or {}
    lsc.capabilities.add_capabilities.extend(str(x) for x in caps.get("add") or [])
    lsc.capabilities.drop_capabilities.extend(str(x) for x in caps.get("drop") or [])
    lsc.supplemental_groups.extend(supplemental_groups(pod))
    lsc.supplemental_groups_policy = _groups_policy(pod)  # type: ignore[assignment]
    if not lsc.privileged and sc.get("procMount") != "Unmasked":
        lsc.masked_paths.extend(DEFAULT_MASKED_PATHS)
        lsc.readonly_paths.extend(DEFAULT_READONLY_PATHS)
    seccomp = _profile(sc.get("seccompProfile"), seccomp_root)
    if seccomp is not None:
        lsc.seccomp.CopyFrom(seccomp)
    else:  # the kubelet's default without --seccomp-default: Unconfined
        lsc.seccomp.profile_type = pb.SecurityProfile.Unconfined
    apparmor = _profile(sc.get("appArmorProfile"), "")
    if apparmor is not None:
        lsc.apparmor.CopyFrom(apparmor)
    se = sc.get("seLinuxOptions") or {}
    if se:
        lsc.selinux_options.CopyFrom(pb.SELinuxOption(user=se.get("user", ""), role=se.get("role", ""),
                                                      type=se.get("type", ""), level=se.get("level", "")))


def apply_sandbox(pod: Mapping[str, Any], cfg: pb.PodSandboxConfig, seccomp_root: str = SECCOMP_ROOT) -> None:
    """The sandbox's security context and sysctls (kubelet's generatePodSandboxLinuxConfig)."""
    spec = pod.get("spec") or {}
    psc = spec.get("securityContext") or {}
    ssc = cfg.linux.security_context
    if psc.get("runAsUser") is not None:
        ssc.run_as_user.value = int(psc["runAsUser"])
    if psc.get("runAsGroup") is not None:
        ssc.run_as_group.value = int(psc["runAsGroup"])
    ssc.supplemental_groups.extend(supplemental_groups(pod))
    ssc.supplemental_groups_policy = _groups_policy(pod)  # type: ignore[assignment]
    ssc.privileged = any(bool((c.get("securityContext") or {}).get("privileged"))
                         for f in ("initContainers", "containers") for c in spec.get(f) or [])
    seccomp = _profile(psc.get("seccompProfile"), seccomp_root)
    if seccomp is not None:
        ssc.seccomp.CopyFrom(seccomp)
    for s in psc.get("sysctls") or []:  # slash-separated names as dotted ones (ConvertPodSysctlsVariable...)
        cfg.linux.sysctls[sysctl_dots(str(s.get("name", "")))] = str(s.get("value", ""))
