"""Launching container processes: the static C shim starts them; no resident Python.

`launch()` posix_spawns the static C launcher (cri/shim/launch.c) with the container's spec on a
pipe. That process (P1) detaches, creates or joins the pid namespace, and forks the container init
(G). G joins the sandbox's namespaces, builds its mount namespace (rootfs, /proc, /sys, /dev,
mounts, masks), pivots, joins its cgroup, drops privileges and execs the user's command; P1 execs
the static C shim (cri/shim/shim.c), which stays G's parent, writes G's output to the CRI log and
its exit status to disk. So each running
container costs one tiny C process, its exit is recorded even while the daemon is down, and
starting it costs no fork of the (large, threaded) daemon nor any interpreter work in between.

`exec_in()` runs a command inside a running container (ExecSync) from a forked child of the daemon.

Everything a forked child calls is already imported and resolved: a child of the threaded
daemon must not import, log or take locks. The fork itself runs on a worker thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import selectors
import signal
import struct
import termios
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kernel import procs
from kernel import syscalls as sc

if TYPE_CHECKING:
    from kernel.seccomp import Profile


@dataclasses.dataclass(frozen=True)
class Mount:
    """A bind mount of a host path (file or directory) into the container."""

    source: str
    target: str  # absolute path inside the container
    readonly: bool = False
    propagation: int = sc.MS_PRIVATE  # MS_PRIVATE, MS_SLAVE or MS_SHARED (applied recursively)
    recursive_ro: bool = False  # read-only down to every submount (mount_setattr)


@dataclasses.dataclass(frozen=True)
class Creds:
    uid: int = 0
    gid: int = 0
    groups: tuple[int, ...] = ()
    caps: int = 0  # bounding (and, for root, effective/permitted) capability mask
    no_new_privs: bool = False
    seccomp: Profile | None = None  # loaded before the exec
    apparmor: str = ""  # the AppArmor profile the exec goes to ("" = none); see cri/runtime/apparmor.py


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    argv: tuple[str, ...]
    env: tuple[str, ...]
    cwd: str
    creds: Creds
    rootfs: str
    mounts: tuple[Mount, ...]
    masked_paths: tuple[str, ...]
    readonly_paths: tuple[str, ...]
    readonly_rootfs: bool
    privileged: bool
    join_ns: tuple[tuple[str, str], ...]  # ("net", "/proc/<pause>/ns/net"), ...
    pid_mode: str  # "new" | "join" | "host"
    pid_ns_path: str
    shm_source: str  # host directory bound on /dev/shm ("" = a private tmpfs)
    devices: tuple[tuple[str, int, int, int], ...]  # (container path, st_mode incl. type, major, minor)
    cgroup_procs: tuple[str, ...]
    oom_score_adj: int | None
    shim: str
    exit_file: str
    log_path: str  # "" = discard output
    stdin_path: str = ""  # the stdin FIFO the shim holds open ("" = /dev/null); see cri/runtime/stdio.py
    ctl_path: str = ""  # the shim's control FIFO (close-stdin, resize)
    attach_path: str = ""  # the socket the shim serves raw output on to attached clients ("" = none)
    tty: bool = False  # the container's stdio is a terminal of its own devpts
    launcher: str = ""  # cri/shim/launch ("": beside the shim)


@dataclasses.dataclass(frozen=True)
class Launched:
    pid: int
    shim_pid: int


class LaunchError(Exception):
    """The container process could not be set up or exec'd; the message says which step."""


# -- launching a container -------------------------------------------------------------------------


SPEC_VERSION = "nodeagent-launch-3"
SPEC_FD, SYNC_FD = 3, 4  # where the launcher finds the spec and the sync pipe


def _env_dict(env: Iterable[str]) -> dict[str, str]:
    """NAME=value strings as os.execvpe takes them: a bare NAME is empty, the last duplicate wins."""
    out = {}
    for e in env:
        name, _, value = e.partition("=")
        out[name] = value
    return out


def encode_spec(spec: LaunchSpec) -> bytes:
    """The spec as launch.c reads it: NUL-terminated strings in a fixed order, lists prefixed by
    their length. The environment is normalised as os.execvpe would (last duplicate wins)."""
    c = spec.creds
    env = _env_dict(spec.env)
    seccomp, bpf = -1, b""
    if c.seccomp is not None:
        bpf, nnp = c.seccomp.bpf()
        seccomp = int(nnp)
    out: list[str] = [SPEC_VERSION]

    def items(xs) -> None:
        xs = list(xs)
        out.append(str(len(xs)))
        out.extend(str(x) for x in xs)

    items(spec.argv)
    items(f"{k}={v}" for k, v in env.items())
    out += [spec.cwd, str(c.uid), str(c.gid)]
    items(c.groups)
    out += [str(c.caps), str(int(c.no_new_privs)), str(seccomp), bpf.hex(), c.apparmor, spec.rootfs,
            str(len(spec.mounts))]
    for m in spec.mounts:
        out += [m.source, m.target, str(int(m.readonly)), str(m.propagation), str(int(m.recursive_ro))]
    items(spec.masked_paths)
    items(spec.readonly_paths)
    out += [str(int(spec.readonly_rootfs)), str(int(spec.privileged)), str(len(spec.join_ns))]
    for kind, path in spec.join_ns:
        out += [kind, path]
    out += [spec.pid_mode, spec.pid_ns_path, spec.shm_source, str(len(spec.devices))]
    for path, mode, major, minor in spec.devices:
        out += [path, str(mode), str(major), str(minor)]
    items(spec.cgroup_procs)
    out += ["" if spec.oom_score_adj is None else str(spec.oom_score_adj), spec.exit_file, spec.log_path,
            spec.stdin_path, spec.ctl_path, str(int(spec.tty)), str(sc.last_cap()), spec.shim,
            spec.attach_path]
    if any("\0" in x for x in out):
        raise LaunchError("spec: embedded null byte")
    return b"".join(os.fsencode(x) + b"\0" for x in out)


def _above_std(fd: int) -> int:
    """fd moved above the slots the spawned shim expects its pipes in (so no dup2 clobbers another)."""
    if fd > SYNC_FD:
        return fd
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


def create_log(path: str) -> None:
    """Create the container's CRI log before it starts, as containerd does: the shim opens it only after
    the container exec'd, and StartContainer's caller may read or follow it (Attach does) at once."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o640))
    except OSError as e:
        raise LaunchError(f"failed to create and open log file {path}: {e.strerror or e}") from e


def launch(spec: LaunchSpec) -> Launched:
    """Spawn the launcher, which starts the container and becomes its shim; return once the container
    has exec'd and its log exists (blocking: use a thread)."""
    if spec.log_path:
        create_log(spec.log_path)
    payload = encode_spec(spec)
    launcher = spec.launcher or os.path.join(os.path.dirname(spec.shim), "launch")
    spec_r, spec_w = (_above_std(fd) for fd in os.pipe())
    sync_r, sync_w = (_above_std(fd) for fd in os.pipe())
    try:
        shim_pid = procs.spawn(launcher, [launcher], [(spec_r, SPEC_FD), (sync_w, SYNC_FD)], setsid=True)
    except OSError as e:
        os.close(spec_w)
        os.close(sync_r)
        raise LaunchError(f"shim: {e.strerror or e}: {launcher}") from e
    finally:
        os.close(spec_r)
        os.close(sync_w)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(spec_w, view):]
    except BrokenPipeError:
        pass  # the shim failed early; it said why on the sync pipe
    finally:
        os.close(spec_w)
    out = _read_all(sync_r)
    pid, err = 0, ""
    for line in out.decode(errors="replace").splitlines():
        if line.startswith("pid "):
            pid = int(line[4:])
        elif line.startswith("err "):
            err = err or line[4:]
    if err or not pid:
        # G failed (and exited) or P1 failed before it: the shim records the exit; reap what is ours.
        _reap(shim_pid)
        raise LaunchError(err or "container process did not start")
    return Launched(pid, shim_pid)


def _read_all(fd: int) -> bytes:
    chunks = []
    try:
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(fd)
    return b"".join(chunks)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _write_file(path: str, data: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)


def _apply_apparmor(profile: str) -> None:
    """Ask AppArmor to move this thread to `profile` at its next execve (runc's way). Done while
    still root and before no_new_privs, which would forbid the transition."""
    data = f"exec {profile}".encode()
    try:
        try:
            fd = os.open("/proc/thread-self/attr/apparmor/exec", os.O_WRONLY | os.O_CLOEXEC)
        except FileNotFoundError:  # kernels before 5.8 have only the shared LSM attribute
            fd = os.open("/proc/self/attr/exec", os.O_WRONLY | os.O_CLOEXEC)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(0, "short write")
        finally:
            os.close(fd)
    except OSError as e:  # not FileNotFoundError to the caller: that would read as "no such command"
        raise LaunchError(f"apparmor profile {profile}: {e.strerror}") from None


def _drop_privileges(c: Creds) -> None:
    if c.apparmor:
        _apply_apparmor(c.apparmor)
    if c.seccomp is not None:
        c.seccomp.load()  # still root with every capability here, so no no_new_privs is needed
    for cap in range(sc.last_cap() + 1):
        if not c.caps & (1 << cap):
            sc.prctl(sc.PR_CAPBSET_DROP, cap)
    sc.setgroups(list(c.groups))
    sc.setresgid(c.gid)
    sc.setresuid(c.uid)  # a non-root uid loses every capability here (no keepcaps)
    if c.uid == 0:
        sc.capset(c.caps, c.caps, 0)
    if c.no_new_privs:
        sc.prctl(sc.PR_SET_NO_NEW_PRIVS, 1)


# -- exec in a running container -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False


OUTPUT_CAP = 16 << 20


@dataclasses.dataclass
class ExecHandle:
    """A command running in a container: E1 (our child, outside) waits for the command (inner)."""

    e1: int
    inner: int
    stdin: int | None  # write end (or the pty master when tty)
    stdout: int  # read end (the pty master when tty)
    stderr: int | None
    tty: bool

    def kill(self) -> None:
        # Kill only the command: E1 then reaps it. Were E1 killed first, the command would be
        # re-parented outside the container's pid namespace, and an unreaped zombie there keeps
        # the namespace (and so the container's init) from ever finishing its exit.
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.inner or self.e1, signal.SIGKILL)

    def wait(self) -> int:
        """Block until the command ends; its exit code (128+signal when killed)."""
        _, status = os.waitpid(self.e1, 0)
        return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


def spawn_exec(target_pid: int, argv: list[str], env: list[str], cwd: str, creds: Creds,
               cgroup_procs: list[str], stdin: bool = False, tty: bool = False) -> ExecHandle:
    """Start argv in the namespaces, cgroup and identity of a running container (blocking briefly)."""
    kinds = [("net", sc.CLONE_NEWNET), ("ipc", sc.CLONE_NEWIPC), ("uts", sc.CLONE_NEWUTS),
             ("pid", sc.CLONE_NEWPID), ("mnt", sc.CLONE_NEWNS)]
    fds = []
    try:
        for kind, flag in kinds:
            fds.append((os.open(f"/proc/{target_pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC), flag))
    except OSError:
        for fd, _ in fds:
            os.close(fd)
        raise LaunchError("the container is not running") from None
    if tty:
        master, slave = _container_pty(target_pid)
        child_fds = (slave, slave, slave)
        parent_fds: tuple[int | None, int, int | None] = (master, master, None)
        close_after = [slave]
    else:
        in_r, in_w = os.pipe() if stdin else (os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC), None)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        child_fds = (in_r, out_w, err_w)
        parent_fds = (in_w, out_r, err_r)
        close_after = [in_r, out_w, err_w]
    sync_r, sync_w = os.pipe()
    e1 = os.fork()
    if e1 == 0:
        try:
            # Another thread may be between its own fork and closing its command's pipe ends: keep
            # only ours, or this process (alive as long as our command) would hold theirs open.
            _close_all_but({sync_w, *child_fds, *(fd for fd, _ in fds)})
            for f in cgroup_procs:
                with contextlib.suppress(OSError):
                    _write_file(f, "0")
            for fd, flag in fds:
                sc.setns(fd, flag)
            e2 = os.fork()
            if e2 == 0:
                code = 126
                try:
                    os.chdir(cwd or "/")
                    if tty:
                        os.setsid()
                        fcntl.ioctl(child_fds[0], termios.TIOCSCTTY, 0)
                    _drop_privileges(creds)
                    for target, fd in enumerate(child_fds):
                        os.dup2(fd, target)
                    os.closerange(3, sync_w)
                    os.closerange(sync_w + 1, 1 << 16)
                    envd = _env_dict(env)
                    if tty:
                        envd.setdefault("TERM", "xterm")
                    os.execvpe(argv[0], argv, envd)
                except BaseException as e:
                    code = 127 if isinstance(e, FileNotFoundError) else 126
                    with contextlib.suppress(BaseException):
                        os.write(2, f"exec {argv[0]}: {e}\n".encode())
                os._exit(code)
            os.write(sync_w, f"{e2}\n".encode())
            os.close(sync_w)
            for fd in close_after + [p for p in parent_fds if p is not None]:
                with contextlib.suppress(OSError):
                    os.close(fd)
            _, status = os.waitpid(e2, 0)
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
        except BaseException:
            os._exit(126)
    for fd, _ in fds:
        os.close(fd)
    for fd in close_after + [sync_w]:
        os.close(fd)
    inner = _read_all(sync_r).strip()
    return ExecHandle(e1, int(inner) if inner else 0, parent_fds[0], parent_fds[1], parent_fds[2], tty)


def _close_all_but(keep: set[int]) -> None:
    """Close every fd from 3 up except those in keep (close_range between them)."""
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 16)


TIOCSPTLCK = 0x40045431
TIOCGPTPEER = 0x5441


def _container_pty(target_pid: int) -> tuple[int, int]:
    """A pty from the container's own devpts (so /dev/pts/N exists in there), else from ours."""
    try:
        master = os.open(f"/proc/{target_pid}/root/dev/pts/ptmx", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        return os.openpty()
    try:
        fcntl.ioctl(master, TIOCSPTLCK, struct.pack("i", 0))
        slave = fcntl.ioctl(master, TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY)
    except OSError:
        os.close(master)
        return os.openpty()
    return master, slave


def exec_in(target_pid: int, argv: list[str], env: list[str], cwd: str, creds: Creds,
            cgroup_procs: list[str], timeout: float | None) -> ExecResult:
    """Run argv in a running container and collect its output (ExecSync; blocking)."""
    h = spawn_exec(target_pid, argv, env, cwd, creds, cgroup_procs)
    assert h.stderr is not None  # without a terminal the command has a stderr pipe of its own
    out, err, timed_out = _collect(h.stdout, h.stderr, timeout)
    if timed_out:
        h.kill()
    return ExecResult(h.wait(), out, err, timed_out)


def _collect(out_r: int, err_r: int, timeout: float | None) -> tuple[bytes, bytes, bool]:
    bufs = {out_r: bytearray(), err_r: bytearray()}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    deadline = None if not timeout else time.monotonic() + timeout
    timed_out = False
    try:
        while sel.get_map():
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                timed_out = True
                break
            for key, _ in sel.select(wait):
                data = os.read(key.fd, 65536)
                if not data:
                    sel.unregister(key.fd)
                    continue
                buf = bufs[key.fd]
                if len(buf) < OUTPUT_CAP:
                    buf.extend(data[: OUTPUT_CAP - len(buf)])
    finally:
        sel.close()
        os.close(out_r)
        os.close(err_r)
    return bytes(bufs[out_r]), bytes(bufs[err_r]), timed_out
