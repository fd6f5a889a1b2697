"""AppArmor for containers: which profile a container runs under, and the runtime's default profile.

The choice follows containerd's CRI plugin, so a pod behaves the same on either runtime:

- the typed `apparmor` SecurityProfile wins over the deprecated `apparmor_profile` string
  ("runtime/default", "unconfined" or "localhost/<name>"; anything else is refused);
- nothing set means RuntimeDefault where the host has AppArmor (kubernetes#51746);
- a privileged container gets no default profile, but a Localhost one still applies;
- on a host without AppArmor (or without apparmor_parser) only "unconfined" (or nothing) is
  accepted: "apparmor is not supported";
- a Localhost profile must already be loaded in the kernel when the container is created.

RuntimeDefault is our own profile, `nodeagent-default`: generated here (the same policy as
containerd's `cri-containerd.apparmor.d`: no mounts, no writes to /proc's and /sys's kernel knobs)
and loaded with apparmor_parser when a container first needs it. The profile is applied as runc
does: the launcher (cri/shim/launch.c), or the forked exec child (cri/runtime/process.py), writes
"exec <name>" to its own attr/apparmor/exec just before execve, so the transition happens at the exec.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess
import threading
from pathlib import Path

from cri.proto import api_pb2 as pb
from cri.runtime.errors import FailedPrecondition, InvalidArgument

DEFAULT_PROFILE = "nodeagent-default"
PROFILES = "/sys/kernel/security/apparmor/profiles"
POLICY_DIR = "/etc/apparmor.d"
LOCALHOST = "localhost/"

RUNTIME_DEFAULT = pb.SecurityProfile.RuntimeDefault
UNCONFINED = pb.SecurityProfile.Unconfined
LOCAL = pb.SecurityProfile.Localhost


@dataclasses.dataclass(frozen=True)
class Choice:
    """What a container runs under: kind "none", "default" (our profile) or "localhost" (name)."""

    kind: str
    name: str = ""

    @property
    def profile(self) -> str:
        """The profile name the launcher applies ("" = none)."""
        return {"none": "", "default": DEFAULT_PROFILE}.get(self.kind, self.name)


NONE = Choice("none")


@functools.lru_cache(maxsize=1)
def host_supports() -> bool:
    """containerd's test: the kernel has AppArmor enabled, its securityfs interface is there, and so
    is apparmor_parser (without it no default profile can be loaded, and containerd runs every
    container unconfined and refuses explicit profiles; so do we)."""
    try:
        enabled = Path("/sys/module/apparmor/parameters/enabled").read_text()
    except OSError:
        return False
    return enabled.startswith("Y") and os.path.isdir("/sys/kernel/security/apparmor") and parser() is not None


def requested(sec: pb.LinuxContainerSecurityContext) -> tuple[int, str] | None:
    """(profile type, localhost name) the container asks for, or None when it asks for nothing."""
    if sec.HasField("apparmor"):
        sp = sec.apparmor
        if sp.profile_type not in (RUNTIME_DEFAULT, UNCONFINED, LOCAL):
            raise InvalidArgument(f"apparmor: unknown profile_type {sp.profile_type}")
        if sp.profile_type != LOCAL:
            if sp.localhost_ref:
                raise InvalidArgument("apparmor: localhost_ref must only be set if profile_type is Localhost")
            return sp.profile_type, ""
        # A "localhost/" prefix is tolerated here too (critest sends it; containerd trims it).
        return LOCAL, _profile_name(sp.localhost_ref.removeprefix(LOCALHOST), "apparmor.localhost_ref")
    path = sec.apparmor_profile
    if not path:
        return None
    if path in ("runtime/default", "docker/default"):
        return RUNTIME_DEFAULT, ""
    if path == "unconfined":
        return UNCONFINED, ""
    if path.startswith(LOCALHOST):
        return LOCAL, _profile_name(path.removeprefix(LOCALHOST), "apparmor_profile")
    raise InvalidArgument(
        f"apparmor_profile: {path!r} is not runtime/default, unconfined or localhost/<profile>"
    )


def _profile_name(name: str, field: str) -> str:
    # The name goes to the kernel as "exec <name>": one line, no NUL.
    if not name or any(ch in name for ch in "\0\n"):
        raise InvalidArgument(f"{field}: {name!r} is not an AppArmor profile name")
    return name


def choose(sec: pb.LinuxContainerSecurityContext, enabled: bool) -> Choice:
    """The profile a container gets, given whether the host has AppArmor (no kernel lookups here)."""
    want = requested(sec)
    if not enabled:
        if want is not None and want[0] != UNCONFINED:
            raise FailedPrecondition("apparmor is not supported")
        return NONE
    kind, name = want if want is not None else (RUNTIME_DEFAULT, "")
    if kind == UNCONFINED:
        return NONE
    if kind == RUNTIME_DEFAULT:
        return NONE if sec.privileged else Choice("default")
    return Choice("localhost", name)


def loaded(name: str, profiles: str = PROFILES) -> bool:
    """Whether the kernel has a profile of that name (a line "<name> (<mode>)" in the profiles list)."""
    with open(profiles, encoding="utf-8", errors="replace") as f:
        return any(line.startswith(name + " (") for line in f)


def check_loaded(name: str) -> None:
    """Refuse a Localhost profile the kernel does not have (containerd's "apparmor profile not found")."""
    try:
        ok = loaded(name)
    except OSError as e:
        raise FailedPrecondition(f"apparmor: cannot read {PROFILES}: {e.strerror}") from None
    if not ok:
        raise FailedPrecondition(f"apparmor profile not found {name} (load it with apparmor_parser first)")


# -- the RuntimeDefault profile --------------------------------------------------------------------

# The policy of Docker's and containerd's default profile: a container may do what containers do
# (files, network, capabilities it holds, signals and ptrace among its own processes, signals from
# the unconfined host), but may not mount, nor write the kernel's knobs in /proc and /sys, nor
# read the kernel's memory and firmware.
_BODY = """\
  network,
  capability,
  file,
  umount,

  signal (receive) peer=unconfined,
  signal (send,receive) peer={name},
  ptrace (trace,tracedby,read,readby) peer={name},

  deny mount,

  # /proc: only a process's own directories, /proc/sys/kernel/shm* and /proc/sys/k* stay writable
  deny @{{PROC}}/* w,
  deny @{{PROC}}/{{[^1-9/],[^1-9/][^0-9/],[^1-9s/][^0-9y/][^0-9s/],[^1-9/][^0-9/][^0-9/][^0-9/]*}}/** w,
  deny @{{PROC}}/sys/[^k]** w,
  deny @{{PROC}}/sys/kernel/{{?,??,[^s][^h][^m]**}} w,
  deny @{{PROC}}/sysrq-trigger rwklx,
  deny @{{PROC}}/kcore rwklx,

  # /sys: read-only, except the cgroup tree; firmware, powercap and LSM files not even readable
  deny /sys/[^f]*/** wklx,
  deny /sys/f[^s]*/** wklx,
  deny /sys/fs/[^c]*/** wklx,
  deny /sys/fs/c[^g]*/** wklx,
  deny /sys/fs/cg[^r]*/** wklx,
  deny /sys/firmware/** rwklx,
  deny /sys/devices/virtual/powercap/** rwklx,
  deny /sys/kernel/security/** rwklx,
"""


def default_profile(name: str = DEFAULT_PROFILE, policy_dir: str = POLICY_DIR) -> str:
    """The RuntimeDefault profile's source, using the distribution's abi, tunables and base
    abstraction where it ships them (Debian's apparmor package does)."""
    d = Path(policy_dir)
    head = []
    if (d / "abi" / "3.0").exists():
        head.append("abi <abi/3.0>,")
    head.append("#include <tunables/global>" if (d / "tunables" / "global").exists() else "@{PROC}=/proc/")
    base = "  #include <abstractions/base>\n\n" if (d / "abstractions" / "base").exists() else ""
    return (
        "\n".join(head)
        + f"\n\nprofile {name} flags=(attach_disconnected,mediate_deleted) {{\n"
        + base
        + _BODY.format(name=name)
        + "}\n"
    )


def parser() -> str | None:
    """apparmor_parser (Debian's apparmor package puts it in /sbin, often off a service's PATH)."""
    return shutil.which("apparmor_parser") or next(
        (p for p in ("/usr/sbin/apparmor_parser", "/sbin/apparmor_parser") if os.access(p, os.X_OK)), None
    )


def load(text: str) -> None:
    """Load (or replace) a profile in the kernel from its source, without touching the parser's cache."""
    exe = parser()
    if exe is None:
        raise FailedPrecondition("apparmor: apparmor_parser not found (install the apparmor package)")
    p = subprocess.run([exe, "-K", "-r"], input=text, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise FailedPrecondition(f"apparmor: apparmor_parser failed: {p.stderr.strip() or p.returncode}")


_load_lock = threading.Lock()


def default_loaded() -> bool:
    """The fast path of ensure_default (no lock, no thread): the kernel already has our profile."""
    try:
        return loaded(DEFAULT_PROFILE)
    except OSError:
        return False


def ensure_default() -> None:
    """Load nodeagent-default unless the kernel has it (blocking: run it in a thread). Idempotent:
    concurrent creates load it once; a profile someone unloaded is loaded again."""
    with _load_lock:
        try:
            if loaded(DEFAULT_PROFILE):
                return
        except OSError as e:
            raise FailedPrecondition(f"apparmor: cannot read {PROFILES}: {e.strerror}") from None
        load(default_profile())
