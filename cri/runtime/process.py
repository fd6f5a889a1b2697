"""Launching container processes: fork from the daemon, set up in the child, exec; no resident Python.

`launch()` forks once; that child (P1) detaches (setsid), creates or joins the pid namespace, and
forks the container init (G). G joins the cgroup and the sandbox's namespaces, builds its mount
namespace (rootfs, /proc, /sys, /dev, mounts, masks), pivots, drops privileges and execs the
user's command. P1 then execs the static C shim (cri/shim/shim), which stays G's parent, writes
G's output to the CRI log and its exit status to disk. So each running container costs one tiny
C process, and its exit is recorded even while the daemon is down.

`exec_in()` runs a command inside a running container the same way (ExecSync).

Everything a forked child calls is already imported and resolved: a child of the threaded
daemon must not import, log or take locks. The fork itself runs on a worker thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import os
import selectors
import signal
import socket
import stat
import struct
import termios
import time

from cri.runtime import syscalls as sc

NS_FLAGS = {"net": sc.CLONE_NEWNET, "ipc": sc.CLONE_NEWIPC, "uts": sc.CLONE_NEWUTS}

DEVICES = (  # name, major, minor (the OCI default set)
    ("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0),
)
DEV_LINKS = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
             ("stderr", "/proc/self/fd/2"), ("ptmx", "pts/ptmx"), ("core", "/proc/kcore"))


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
    seccomp: object | None = None  # a cri.runtime.seccomp.Profile, loaded before the exec


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
    tty: bool = False  # the container's stdio is a terminal of its own devpts


@dataclasses.dataclass(frozen=True)
class Launched:
    pid: int
    shim_pid: int


class LaunchError(Exception):
    """The container process could not be set up or exec'd; the message says which step."""


# -- launching a container -------------------------------------------------------------------------


def launch(spec: LaunchSpec) -> Launched:
    """Fork the container and its shim; return once the container has exec'd (blocking: use a thread)."""
    r, w = os.pipe()  # close-on-exec: EOF once G has exec'd and P1 has become the shim
    shim_pid = os.fork()
    if shim_pid == 0:
        code = 127
        try:
            os.close(r)
            _p1(spec, w)
        except BaseException as e:
            with contextlib.suppress(BaseException):
                os.write(w, f"err shim: {e}\n".encode())
        os._exit(code)
    os.close(w)
    out = _read_all(r)
    pid, err = 0, ""
    for line in out.decode(errors="replace").splitlines():
        if line.startswith("pid "):
            pid = int(line[4:])
        elif line.startswith("err "):
            err = err or line[4:]
    if err or not pid:
        # G failed (and exited) or P1 failed before exec: the shim records the exit; reap what is ours.
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


def _p1(spec: LaunchSpec, w: int) -> None:
    os.setsid()
    if spec.pid_mode == "new":
        sc.unshare(sc.CLONE_NEWPID)
    elif spec.pid_mode == "join":
        fd = os.open(spec.pid_ns_path, os.O_RDONLY | os.O_CLOEXEC)
        sc.setns(fd, sc.CLONE_NEWPID)
        os.close(fd)
    # stdin: the shim holds the FIFO read-write (no EOF while nobody is attached); G reads it.
    in_keep = os.open(spec.stdin_path, os.O_RDWR | os.O_CLOEXEC) if spec.stdin_path else -1
    in_r = os.open(spec.stdin_path, os.O_RDONLY | os.O_CLOEXEC) if spec.stdin_path and not spec.tty else -1
    ctl = os.open(spec.ctl_path, os.O_RDWR | os.O_CLOEXEC) if spec.ctl_path else -1
    if spec.tty:  # G opens its terminal in its own devpts and hands us the master over this socket
        pty_ours, pty_g = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r = out_w = err_r = err_w = -1
    else:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
    gpid = os.fork()
    if gpid == 0:
        try:
            if spec.tty:
                pty_ours.close()
            else:
                os.close(out_r)
                os.close(err_r)
            _container_init(spec, (in_r, out_w, err_w, pty_g.fileno() if spec.tty else -1), w)
        except BaseException as e:
            with contextlib.suppress(BaseException):
                os.write(w, f"err {e}\n".encode())
        os._exit(127)
    if spec.tty:
        pty_g.close()
        _, fds, _, _ = socket.recv_fds(pty_ours, 1, 1)  # nothing when G failed before (it said why)
        out_r = fds[0] if fds else os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
        pty_ours.close()
    else:
        os.close(out_w)
        os.close(err_w)
    for fd in (in_r,):
        if fd >= 0:
            os.close(fd)
    extra: list[str] = []
    if spec.stdin_path or spec.ctl_path or spec.tty:
        extra = [str(in_keep), str(ctl), "1" if spec.tty else "0"]
    for fd in (out_r, err_r, in_keep, ctl):
        if fd >= 0:
            os.set_inheritable(fd, True)
    os.write(w, f"pid {gpid}\n".encode())
    os.execv(spec.shim, [spec.shim, spec.exit_file, spec.log_path or "-", str(gpid), str(out_r), str(err_r), *extra])


def _write_file(path: str, data: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)


def _container_init(spec: LaunchSpec, stdio: tuple[int, int, int, int], sync_w: int) -> None:
    """stdio: (stdin FIFO read end or -1, stdout pipe, stderr pipe, socket for the pty master or -1)."""
    in_r, out_w, err_w, pty_sock = stdio
    step = "cgroup"
    try:
        for f in spec.cgroup_procs:
            _write_file(f, "0")
        step = "oom_score_adj"
        if spec.oom_score_adj is not None:
            _write_file("/proc/self/oom_score_adj", str(spec.oom_score_adj))
        step = "namespaces"
        fds = [(os.open(path, os.O_RDONLY | os.O_CLOEXEC), NS_FLAGS[kind]) for kind, path in spec.join_ns]
        for fd, flag in fds:
            sc.setns(fd, flag)
            os.close(fd)
        sc.unshare(sc.CLONE_NEWNS)
        bidirectional = any(m.propagation == sc.MS_SHARED for m in spec.mounts)
        if bidirectional:
            # runc's rootfsPropagation=rshared: the host's mounts stay peers (so a Bidirectional bind
            # joins its source's peer group), only the rootfs' own mount is cut off from the host
            sc.mount(None, _mount_point_of(spec.rootfs), None, sc.MS_PRIVATE)
        else:
            sc.mount(None, "/", None, sc.MS_REC | sc.MS_SLAVE)
        step = "rootfs"
        _build_rootfs(spec)
        step = "pivot_root"
        os.chdir(spec.rootfs)
        old_root = os.open("/", os.O_DIRECTORY | os.O_RDONLY | os.O_CLOEXEC) if bidirectional else -1
        sc.pivot_root(".", ".")
        if bidirectional:  # as runc: from the old root, make it rslave so our unmount stays here
            os.fchdir(old_root)
            os.close(old_root)
            sc.mount(None, ".", None, sc.MS_REC | sc.MS_SLAVE)
        sc.umount(".", sc.MNT_DETACH)
        os.chdir("/")
        step = "masked paths"
        if not spec.privileged:
            _mask(spec.masked_paths, spec.readonly_paths)
        if spec.readonly_rootfs:
            sc.mount(None, "/", None, sc.MS_BIND | sc.MS_REMOUNT | sc.MS_RDONLY | sc.MS_REC)
        if spec.tty:
            step = "terminal"
            term = _container_terminal(pty_sock, spec.creds.uid)
        step = "credentials"
        _drop_privileges(spec.creds)
        step = "working directory"
        if spec.cwd:
            with contextlib.suppress(FileExistsError, PermissionError):
                os.makedirs(spec.cwd)
            os.chdir(spec.cwd)
        step = "stdio"
        if spec.tty:
            for target in (0, 1, 2):
                os.dup2(term, target)
        else:
            os.dup2(in_r if in_r >= 0 else os.open("/dev/null", os.O_RDONLY), 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
        os.closerange(3, sync_w)
        os.closerange(sync_w + 1, 1 << 16)
        step = "exec"
        env = dict(e.split("=", 1) if "=" in e else (e, "") for e in spec.env)
        os.execvpe(spec.argv[0], list(spec.argv), env)
    except OSError as e:
        raise LaunchError(f"{step}: {e.strerror or e}: {spec.argv[0] if step == 'exec' else e.filename or ''}") from e


def _container_terminal(sock: int, uid: int) -> int:
    """A terminal from the container's devpts (after pivot): the master goes to the shim, we keep the slave."""
    master = os.open("/dev/pts/ptmx", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    fcntl.ioctl(master, TIOCSPTLCK, struct.pack("i", 0))
    slave = fcntl.ioctl(master, TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY)
    os.fchown(slave, uid, -1)  # the user's own terminal, as runc makes it
    socket.send_fds(socket.socket(fileno=sock), [b"m"], [master])
    os.close(master)
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    return slave


def secure_join(root: str, path: str) -> str:
    """root + path with every symlink resolved inside root (so a mount target cannot escape it)."""
    parts = [p for p in path.split("/") if p and p != "."]
    cur = ""
    hops = 0
    while parts:
        p = parts.pop(0)
        if p == "..":
            cur = cur.rsplit("/", 1)[0] if "/" in cur else ""
            continue
        candidate = f"{cur}/{p}"
        full = root + candidate
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            cur = candidate
            continue
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > 40:
                raise OSError(errno.ELOOP, "too many symlinks", full)
            target = os.readlink(full)
            if target.startswith("/"):
                cur = ""
            parts = [x for x in target.split("/") if x and x != "."] + parts
            continue
        cur = candidate
    return root + cur if cur else root


def _mkdirs(path: str) -> None:
    os.makedirs(path, exist_ok=True)


def _mkfile(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if not os.path.exists(path):
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))


def _mount_point_of(path: str) -> str:
    """The mount point holding `path` (the longest mount point that is a prefix of it)."""
    path = os.path.realpath(path)
    best = "/"
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4].replace("\\040", " ")
            if (path == mp or path.startswith(mp.rstrip("/") + "/")) and len(mp) > len(best):
                best = mp
    return best


def _build_rootfs(spec: LaunchSpec) -> None:
    root = spec.rootfs
    sc.mount(root, root, None, sc.MS_BIND | sc.MS_REC)
    nsx = sc.MS_NOSUID | sc.MS_NOEXEC | sc.MS_NODEV
    p = secure_join(root, "/proc")
    _mkdirs(p)
    sc.mount("proc", p, "proc", nsx)
    p = secure_join(root, "/sys")
    _mkdirs(p)
    sc.mount("sysfs", p, "sysfs", nsx | (0 if spec.privileged else sc.MS_RDONLY))
    dev = secure_join(root, "/dev")
    _mkdirs(dev)
    sc.mount("tmpfs", dev, "tmpfs", sc.MS_NOSUID, "mode=755,size=65536k")
    for name, major, minor in DEVICES:
        os.mknod(f"{dev}/{name}", 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(f"{dev}/{name}", 0o666)
    for name, target in DEV_LINKS:
        os.symlink(target, f"{dev}/{name}")
    for path, mode, major, minor in spec.devices:
        node = secure_join(root, path)
        os.makedirs(os.path.dirname(node), exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(node)
        os.mknod(node, mode, os.makedev(major, minor))
        os.chmod(node, stat.S_IMODE(mode))
    os.mkdir(f"{dev}/pts")
    sc.mount("devpts", f"{dev}/pts", "devpts", sc.MS_NOSUID | sc.MS_NOEXEC,
             "newinstance,ptmxmode=0666,mode=0620,gid=5")
    os.mkdir(f"{dev}/shm")
    if spec.shm_source:
        sc.mount(spec.shm_source, f"{dev}/shm", None, sc.MS_BIND | sc.MS_REC)
    else:
        sc.mount("shm", f"{dev}/shm", "tmpfs", nsx, "mode=1777,size=65536k")
    os.mkdir(f"{dev}/mqueue")
    with contextlib.suppress(OSError):
        sc.mount("mqueue", f"{dev}/mqueue", "mqueue", nsx)
    for m in spec.mounts:
        target = secure_join(root, m.target)
        if os.path.isdir(m.source):
            _mkdirs(target)
        else:
            _mkfile(target)
        sc.mount(m.source, target, None, sc.MS_BIND | sc.MS_REC)
        if m.readonly:
            sc.mount(None, target, None, sc.MS_BIND | sc.MS_REMOUNT | sc.MS_RDONLY)
        sc.mount(None, target, None, sc.MS_REC | m.propagation)
        if m.recursive_ro:
            sc.mount_setattr_rdonly_recursive(target)


def _mask(masked: tuple[str, ...], readonly: tuple[str, ...]) -> None:
    for path in masked:
        try:
            if os.path.isdir(path):
                sc.mount("tmpfs", path, "tmpfs", sc.MS_RDONLY)
            else:
                sc.mount("/dev/null", path, None, sc.MS_BIND)
        except OSError as e:
            if e.errno != errno.ENOENT and os.path.exists(path):
                raise
    for path in readonly:
        if not os.path.exists(path):
            continue
        sc.mount(path, path, None, sc.MS_BIND | sc.MS_REC)
        sc.mount(None, path, None, sc.MS_BIND | sc.MS_REMOUNT | sc.MS_RDONLY | sc.MS_REC)


def _drop_privileges(c: Creds) -> None:
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
                    envd = dict(e.split("=", 1) if "=" in e else (e, "") for e in env)
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
