"""What a CRI ContainerConfig becomes: the checks CreateContainer makes before anything exists, the launch
document persisted with the container, and the launcher's spec and credentials built from it at start
(and for each exec). Pure, or short reads of files and securityfs; no state of the runtime.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

from cri.proto import api_pb2 as pb
from cri.runtime import apparmor as aalib
from cri.runtime import caps as capslib
from cri.runtime import config as cfglib
from cri.runtime.core import NODE, POD, TARGET
from cri.runtime.errors import InvalidArgument
from cri.runtime.process import Creds, Mount
from cri.runtime.state import ContainerRecord, SandboxRecord
from kernel import syscalls as sc
from kernel.cgroups import Resources

PROPAGATION = {0: sc.MS_PRIVATE, 1: sc.MS_SLAVE, 2: sc.MS_SHARED}
# runc's default device allow-list: mknod of anything, and the standard /dev nodes plus ptys and tun.
DEFAULT_DEVICE_RULES = ["c *:* m", "b *:* m", "c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm",
                        "c 5:0 rwm", "c 5:1 rwm", "c 5:2 rwm", "c 136:* rwm", "c 10:200 rwm"]


# -- checks -------------------------------------------------------------------------------------------


def validate_resources(r: pb.LinuxContainerResources, field: str) -> None:
    if r.cpu_period < 0 or (r.cpu_period and not 1000 <= r.cpu_period <= 1_000_000):
        raise InvalidArgument(f"{field}.cpu_period: must be within 1000-1000000 microseconds")
    if r.cpu_quota and r.cpu_quota != -1 and r.cpu_quota < 1000:
        raise InvalidArgument(f"{field}.cpu_quota: must be -1 or at least 1000 microseconds")
    if r.cpu_shares < 0:
        raise InvalidArgument(f"{field}.cpu_shares: must not be negative")
    if r.memory_limit_in_bytes < 0:
        raise InvalidArgument(f"{field}.memory_limit_in_bytes: must not be negative")
    if r.memory_limit_in_bytes and r.memory_limit_in_bytes < 4096 * 64:
        raise InvalidArgument(f"{field}.memory_limit_in_bytes: below the minimum of 256 KiB")
    if not -1000 <= r.oom_score_adj <= 1000:
        raise InvalidArgument(f"{field}.oom_score_adj: must be within -1000..1000")


def device(d: pb.Device, index: int) -> dict:
    """A host device for the container: its node type, numbers and mode, checked now."""
    field = f"config.devices[{index}]"
    if not d.container_path.startswith("/"):
        raise InvalidArgument(f"{field}.container_path: must be absolute, got {d.container_path!r}")
    perms = d.permissions or "rwm"
    if not perms or set(perms) - set("rwm"):
        raise InvalidArgument(f"{field}.permissions: only r, w and m are allowed, got {perms!r}")
    try:
        st = os.stat(d.host_path)
    except OSError as e:
        raise InvalidArgument(f"{field}.host_path: {d.host_path}: {e.strerror}") from None
    if stat.S_ISCHR(st.st_mode):
        kind = "c"
    elif stat.S_ISBLK(st.st_mode):
        kind = "b"
    else:
        raise InvalidArgument(f"{field}.host_path: {d.host_path} is not a device")
    return {"path": d.container_path, "mode": st.st_mode, "major": os.major(st.st_rdev),
            "minor": os.minor(st.st_rdev), "kind": kind, "permissions": perms}


def check_recursive_ro(m: pb.Mount, field: str) -> None:
    """CRI: a recursive read-only mount must be read-only and private (containerd/runc refuse the rest)."""
    if not m.readonly:
        raise InvalidArgument(f"{field}.recursive_read_only requires readonly")
    if m.propagation != pb.PROPAGATION_PRIVATE:
        raise InvalidArgument(f"{field}.recursive_read_only requires propagation PROPAGATION_PRIVATE")
    if not sc.supports_mount_setattr():
        raise InvalidArgument(f"{field}.recursive_read_only: the kernel has no mount_setattr (Linux >= 5.12)")


def seccomp_choice(sec: pb.LinuxContainerSecurityContext) -> str:
    """"runtime/default", "unconfined" or "localhost:<profile JSON>" (read now, as containerd reads the
    file at create), from the typed field or the deprecated path, like kubelet sends."""
    if sec.privileged:
        return "unconfined"
    if sec.HasField("seccomp"):
        kind = sec.seccomp.profile_type
        if kind == pb.SecurityProfile.Localhost:
            return _localhost_seccomp(sec.seccomp.localhost_ref, "seccomp.localhost_ref")
        return "runtime/default" if kind == pb.SecurityProfile.RuntimeDefault else "unconfined"
    path = sec.seccomp_profile_path
    if path in ("runtime/default", "docker/default"):
        return "runtime/default"
    if path.startswith("localhost/"):
        return _localhost_seccomp(path.removeprefix("localhost/"), "seccomp_profile_path")
    if path not in ("", "unconfined"):
        raise InvalidArgument(f"seccomp_profile_path: {path!r} is not runtime/default, unconfined or "
                              "localhost/<path>")
    return "unconfined"


def _localhost_seccomp(path: str, field: str) -> str:
    from kernel.seccomp import parse_json

    if not os.path.isabs(path):
        raise InvalidArgument(f"{field}: {path!r} is not an absolute path")
    try:
        text = Path(path).read_text()
        parse_json(text)
    except (OSError, ValueError) as e:
        raise InvalidArgument(f"{field}: cannot use seccomp profile {path}: {e}") from None
    return "localhost:" + text


async def apparmor_choice(sec: pb.LinuxContainerSecurityContext) -> str:
    """The AppArmor profile the container's processes run under ("" = none), refusing an
    unloaded Localhost profile and loading our RuntimeDefault one if the kernel lacks it."""
    choice = aalib.choose(sec, aalib.host_supports())
    if choice.kind == "localhost":
        aalib.check_loaded(choice.name)  # a short securityfs read
    elif choice.kind == "default" and not aalib.default_loaded():
        await asyncio.to_thread(aalib.ensure_default)  # apparmor_parser, once
    return choice.profile


def resources(r: pb.LinuxContainerResources) -> Resources:
    unified = tuple(sorted(r.unified.items()))
    pids = 0
    for k, v in unified:
        if k == "pids.max":
            pids = -1 if v == "max" else int(v) if v.isdigit() else 0
    return Resources(cpu_period=r.cpu_period, cpu_quota=r.cpu_quota, cpu_shares=r.cpu_shares,
                     memory_limit=r.memory_limit_in_bytes, memory_swap_limit=r.memory_swap_limit_in_bytes,
                     cpuset_cpus=r.cpuset_cpus, cpuset_mems=r.cpuset_mems, pids_limit=pids,
                     unified=tuple((k, v) for k, v in unified if k != "pids.max"))


def device_rules(devices: list[dict]) -> list[str]:
    """The device cgroup's allow-list: runc's defaults and the container's own devices."""
    return DEFAULT_DEVICE_RULES + [f"{x['kind']} {x['major']}:{x['minor']} {x['permissions']}"
                                   for x in devices]


# -- the launch document (persisted with the container) and the credentials of its processes -----------


def launch_doc(config: pb.ContainerConfig, s: SandboxRecord, sandbox_dir: Path, image: Any,
               argv: list[str], caps: list[str], user: tuple[int, int, list[int]], mount_sources: list[str],
               devices: list[dict], apparmor: str) -> dict[str, Any]:
    """Everything start and exec need, fixed at create: argv, env, identity, mounts, namespaces."""
    sec = config.linux.security_context
    uid, gid, groups = user
    mounts = []
    targets = {m.container_path for m in config.mounts}
    for name in ("hosts", "hostname", "resolv.conf"):
        if f"/etc/{name}" not in targets:
            mounts.append({"source": str(sandbox_dir / name), "target": f"/etc/{name}", "readonly": False,
                           "propagation": 0})
    for m, src in zip(config.mounts, mount_sources, strict=True):
        mounts.append({"source": src, "target": m.container_path,
                       "readonly": m.readonly or m.HasField("image"),  # an image volume is read-only
                       "propagation": m.propagation, "recursive_ro": m.recursive_read_only})
    pid_mode = sec.namespace_options.pid
    return {
        "argv": argv,
        "env": cfglib.environment(image.config, [(e.key, e.value) for e in config.envs], s.hostname),
        "cwd": config.working_dir or image.config.get("WorkingDir") or "/",
        "uid": uid, "gid": gid, "groups": groups, "caps": capslib.mask(caps),
        "no_new_privs": sec.no_new_privs, "privileged": sec.privileged,
        "readonly_rootfs": sec.readonly_rootfs,
        "masked": list(sec.masked_paths) if sec.masked_paths else list(cfglib.MASKED_PATHS),
        "readonly_paths": list(sec.readonly_paths) if sec.readonly_paths else list(cfglib.READONLY_PATHS),
        "mounts": mounts,
        "pid_mode": ("host" if pid_mode == NODE
                     else "join" if pid_mode == TARGET or pid_mode == POD and s.pid_mode == POD else "new"),
        "pid_target": sec.namespace_options.target_id if pid_mode == TARGET else "",
        "oom_score_adj": config.linux.resources.oom_score_adj,
        "seccomp": seccomp_choice(sec),
        "apparmor": apparmor,
        "devices": devices,
    }


def mounts(c: ContainerRecord) -> tuple[Mount, ...]:
    """The launch document's mounts, as the launcher takes them."""
    return tuple(Mount(m["source"], m["target"], m["readonly"],
                       PROPAGATION.get(m["propagation"], sc.MS_PRIVATE), m.get("recursive_ro", False))
                 for m in c.launch["mounts"])


def creds(c: ContainerRecord) -> Creds:
    """The identity, capabilities, seccomp filter and AppArmor profile of a container's processes
    (and its execs)."""
    L = c.launch
    profile = None
    if L.get("seccomp") == "runtime/default":
        from cri.runtime.seccomp import runtime_default

        profile = runtime_default()
    elif L.get("seccomp", "").startswith("localhost:"):
        from kernel.seccomp import from_json

        profile = from_json(L["seccomp"].removeprefix("localhost:"))
    return Creds(L["uid"], L["gid"], tuple(L["groups"]), L["caps"], L["no_new_privs"], profile,
                 L.get("apparmor", ""))

