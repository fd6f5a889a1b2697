"""Turning a CRI ContainerConfig plus the image's config into what the process needs.

Pure functions (no kernel): command/args vs Entrypoint/Cmd, Env, WorkingDir, User (resolved
through the image's /etc/passwd and /etc/group), capabilities, masked paths, validation.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from cri.runtime.errors import InvalidArgument

DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

MASKED_PATHS = ("/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
                "/sys/devices/virtual/powercap")
READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")


def command(image_cfg: dict[str, Any], cmd: list[str], args: list[str]) -> list[str]:
    """Kubernetes' rule: command replaces Entrypoint (and drops Cmd); args replace Cmd."""
    entry = list(image_cfg.get("Entrypoint") or [])
    image_cmd = list(image_cfg.get("Cmd") or [])
    if cmd:
        argv = list(cmd) + list(args)
    elif args:
        argv = entry + list(args)
    else:
        argv = entry + image_cmd
    if not argv:
        raise InvalidArgument("config.command: no command specified and the image has no Entrypoint or Cmd")
    return argv


def environment(image_cfg: dict[str, Any], envs: list[tuple[str, str]], hostname: str) -> list[str]:
    merged: dict[str, str] = {}
    for e in image_cfg.get("Env") or []:
        k, _, v = e.partition("=")
        merged[k] = v
    if "PATH" not in merged:
        merged["PATH"] = DEFAULT_PATH.split("=", 1)[1]
    if hostname:
        merged.setdefault("HOSTNAME", hostname)
    for k, v in envs:
        if not k:
            raise InvalidArgument("config.envs: an environment variable needs a name")
        merged[k] = v
    return [f"{k}={v}" for k, v in merged.items()]


def _read_db(path: Path) -> list[list[str]]:
    with contextlib.suppress(OSError):
        return [line.split(":") for line in path.read_text(errors="replace").splitlines()
                if line and not line.startswith("#")]
    return []


def resolve_user(rootfs: str, user: str, uid: int | None, gid: int | None, username: str,
                 extra_groups: list[int], strict: bool = False) -> tuple[int, int, list[int]]:
    """(uid, gid, supplementary groups) from the request, falling back to the image's User. The groups the
    image's /etc/group gives the user are merged in, unless `strict` (SupplementalGroupsPolicy Strict:
    only the requested ones)."""
    passwd = _read_db(Path(rootfs, "etc/passwd"))
    group = _read_db(Path(rootfs, "etc/group"))
    name = ""
    group_spec = ""
    if uid is not None:
        the_uid = uid
    elif username:
        name = username
        the_uid = -1
    else:
        u, _, group_spec = (user or "0").partition(":")
        if u.isdigit():
            the_uid = int(u)
        else:
            name, the_uid = u, -1
    the_gid = -1
    if name:
        for row in passwd:
            if len(row) >= 4 and row[0] == name:
                the_uid, the_gid = int(row[2]), int(row[3])
                break
        else:
            raise InvalidArgument(f"user {name!r} not found in the image's /etc/passwd")
    else:
        for row in passwd:
            if len(row) >= 4 and row[2] == str(the_uid):
                name, the_gid = row[0], int(row[3])
                break
    if group_spec:
        if group_spec.isdigit():
            the_gid = int(group_spec)
        else:
            for row in group:
                if len(row) >= 3 and row[0] == group_spec:
                    the_gid = int(row[2])
                    break
            else:
                raise InvalidArgument(f"group {group_spec!r} not found in the image's /etc/group")
    if gid is not None:
        the_gid = gid
    if the_gid < 0:
        the_gid = 0
    groups: list[int] = []
    if name and not strict:
        for row in group:
            if len(row) >= 4 and name in row[3].split(",") and row[2].isdigit():
                groups.append(int(row[2]))
    for g in extra_groups:
        if g not in groups:
            groups.append(g)
    return the_uid, the_gid, groups


def check_mount_paths(container_path: str, host_path: str, index: int) -> str:
    field = f"config.mounts[{index}]"
    if not container_path.startswith("/"):
        raise InvalidArgument(f"{field}.container_path: must be absolute, got {container_path!r}")
    if not host_path:
        raise InvalidArgument(f"{field}.host_path: required (or image, for an image volume)")
    real = os.path.realpath(host_path)
    if not os.path.exists(real):
        raise InvalidArgument(f"{field}.host_path: {host_path} does not exist")
    return real
