"""seccomp filters built with libseccomp (the library runc and containerd use), and the OCI/Docker
JSON profile format. Which filter a container gets is the runtime's choice (cri.runtime.seccomp);
here a filter is built once in the daemon and a forked container child only loads it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os

from kernel.errors import KernelError

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_FLTATR_CTL_NNP = 3  # enum scmp_filter_attr


def SCMP_ACT_ERRNO(e: int) -> int:
    return 0x00050000 | (e & 0x0000FFFF)


class SeccompError(KernelError):
    """libseccomp refused to build, export or load a filter."""


class Profile:
    """A loaded-on-demand filter: `load()` applies it to the calling thread (forked child).

    `default_action` for every syscall, and `rules` ((syscall, action), ...) for the others, e.g. a
    Localhost profile from `from_json`. Syscalls this architecture lacks are skipped."""

    def __init__(self, default_action: int, rules: tuple[tuple[str, int], ...] = ()) -> None:
        name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
        self.lib = ctypes.CDLL(name, use_errno=True)
        self.lib.seccomp_init.restype = ctypes.c_void_p
        self.lib.seccomp_init.argtypes = [ctypes.c_uint32]
        self.lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        self.lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
        self.lib.seccomp_load.argtypes = [ctypes.c_void_p]
        self.lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
        self.lib.seccomp_attr_get.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint32)]
        self._bpf: tuple[bytes, bool] | None = None
        self.ctx = self.lib.seccomp_init(default_action)
        if not self.ctx:
            raise SeccompError("seccomp_init failed")
        for name, action in rules:
            if action == default_action:
                continue  # libseccomp refuses a rule that repeats the default
            nr = self.lib.seccomp_syscall_resolve_name(name.encode())
            if nr < 0:
                continue  # not a syscall on this architecture
            rc = self.lib.seccomp_rule_add(self.ctx, action, nr, 0)
            if rc < 0:
                raise SeccompError(-rc, f"seccomp_rule_add {name}")

    def load(self) -> None:
        rc = self.lib.seccomp_load(self.ctx)
        if rc < 0:
            raise SeccompError(-rc, "seccomp_load")

    def bpf(self) -> tuple[bytes, bool]:
        """The compiled filter (struct sock_filter[]) and whether loading it sets no_new_privs, as
        seccomp_load would: what the C launcher loads in the container (exported once)."""
        if self._bpf is None:
            fd = os.memfd_create("seccomp-bpf", os.MFD_CLOEXEC)
            try:
                rc = self.lib.seccomp_export_bpf(self.ctx, fd)
                if rc < 0:
                    raise SeccompError(-rc, "seccomp_export_bpf")
                size = os.lseek(fd, 0, os.SEEK_END)
                prog = os.pread(fd, size, 0)
            finally:
                os.close(fd)
            nnp = ctypes.c_uint32(1)
            rc = self.lib.seccomp_attr_get(self.ctx, SCMP_FLTATR_CTL_NNP, ctypes.byref(nnp))
            if rc < 0:
                raise SeccompError(-rc, "seccomp_attr_get")
            self._bpf = (prog, bool(nnp.value))
        return self._bpf


ACTIONS = {"SCMP_ACT_ALLOW": SCMP_ACT_ALLOW, "SCMP_ACT_KILL": 0, "SCMP_ACT_KILL_THREAD": 0,
           "SCMP_ACT_KILL_PROCESS": 0x80000000, "SCMP_ACT_TRAP": 0x00030000, "SCMP_ACT_LOG": 0x7FFC0000}


def _action(rule: dict, field: str) -> int:
    name = rule.get(field, "")
    if name == "SCMP_ACT_ERRNO":
        return SCMP_ACT_ERRNO(int(rule.get("errnoRet", errno.EPERM)))
    if name not in ACTIONS:
        raise ValueError(f"unsupported seccomp action {name!r}")
    return ACTIONS[name]


def parse_json(text: str) -> tuple[int, tuple[tuple[str, int], ...]]:
    """A Localhost profile in the OCI/Docker JSON format (defaultAction, syscalls[names|name, action,
    errnoRet]): the default action and one (syscall, action) per name. Argument filters are refused
    rather than silently widened."""
    import json

    doc = json.loads(text)
    if not isinstance(doc, dict) or "defaultAction" not in doc:
        raise ValueError("a seccomp profile needs a defaultAction")
    default = _action(doc, "defaultAction")
    rules = []
    for r in doc.get("syscalls") or []:
        if r.get("args"):
            raise ValueError("seccomp rules with argument filters are not supported")
        names = r.get("names") or ([r["name"]] if r.get("name") else [])
        action = _action(r, "action")
        rules += [(n, action) for n in names]
    return default, tuple(rules)


@functools.lru_cache(maxsize=64)
def from_json(text: str) -> Profile:
    default, rules = parse_json(text)
    return Profile(default, rules)
