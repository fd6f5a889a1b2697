"""The runtime: pod sandboxes and containers on real namespaces and cgroups, state on disk.

Each operation is refresh → guard → act → persist, under the object's lock; each step that
acquires something registers its undo, run if a later step fails, so a failed call leaves
nothing behind. Names are reserved before work starts (ALREADY_EXISTS for a duplicate). Exits
are learned from the shim (pidfd readable when it exits, then its exit file), also for exits
that happened while the daemon was down (recovered at start).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import secrets
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from cri.proto import api_pb2 as pb
from cri.runtime import apparmor as aalib
from cri.runtime import caps as capslib
from cri.runtime import config as cfglib
from cri.runtime import stdio
from cri.runtime.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, Unimplemented
from cri.runtime.process import Creds, LaunchError, LaunchSpec, Mount, exec_in, launch
from cri.runtime.state import (
    CREATED,
    EXITED,
    RUNNING,
    SANDBOX_NOTREADY,
    SANDBOX_READY,
    UNKNOWN,
    ContainerRecord,
    SandboxRecord,
    alive,
    decode,
    encode,
    load,
    proc_start,
    save,
)
from kernel import syscalls as sc
from kernel.cgroups import Cgroups, Resources

log = logging.getLogger("nodeagent.cri.runtime")

PACKAGE_DIR = Path(__file__).resolve().parent.parent
DEFAULT_CGROUP_PARENT = "/nodeagent"
POD, CONTAINER, NODE, TARGET = 0, 1, 2, 3
PROPAGATION = {0: sc.MS_PRIVATE, 1: sc.MS_SLAVE, 2: sc.MS_SHARED}


class StartError(Exception):
    """The container process could not be started (maps to UNKNOWN, like containerd)."""


@dataclasses.dataclass
class RuntimeOptions:
    state_dir: Path
    cni_conf_dir: str = "/etc/cni/net.d"
    cni_bin_dirs: tuple[str, ...] = ("/opt/cni/bin", "/usr/lib/cni")
    cni_cache_dir: Path | None = None
    registries: str | None = None
    pause: str = ""
    shim: str = ""
    launcher: str = ""  # starts a container, then execs the shim (default: beside the shim)

    def __post_init__(self) -> None:
        self.state_dir = Path(self.state_dir)
        self.pause = self.pause or os.environ.get("NODEAGENT_PAUSE") or str(PACKAGE_DIR / "pause" / "pause")
        self.shim = self.shim or os.environ.get("NODEAGENT_SHIM") or str(PACKAGE_DIR / "shim" / "shim")
        self.launcher = self.launcher or str(Path(self.shim).with_name("launch"))
        if self.cni_cache_dir is None:
            self.cni_cache_dir = self.state_dir / "cni-cache"


def now_ns() -> int:
    return time.time_ns()


class Undo:
    """Undo actions registered as resources are acquired; run newest first unless committed."""

    def __init__(self) -> None:
        self._steps: list[Callable[[], Any]] = []

    def push(self, fn: Callable[[], Any]) -> None:
        self._steps.append(fn)

    async def run(self) -> None:
        for fn in reversed(self._steps):
            try:
                r = fn()
                if asyncio.iscoroutine(r):
                    await r
            except Exception as e:  # cleanup continues past what is already gone
                log.warning("undo step failed: %s", e)
        self._steps.clear()


class Runtime:
    def __init__(self, opts: RuntimeOptions, cgroups: Cgroups, images: Any = None, cni: Any = None) -> None:
        self.opts = opts
        self.cgroups = cgroups
        self.images = images
        self.cni = cni
        self.sandboxes: dict[str, SandboxRecord] = {}
        self.containers: dict[str, ContainerRecord] = {}
        self._keys: dict[str, str] = {}  # reserved name -> id
        self._locks: dict[str, asyncio.Lock] = {}
        self._exited: dict[str, asyncio.Event] = {}
        self._watches: dict[int, tuple[int, Callable[[], None]]] = {}  # fd -> (pid, callback)
        self._subscribers: list[asyncio.Queue] = []
        self._releases: dict[str, asyncio.Task] = {}  # exited containers' mounts and cgroups being freed
        self._warming: asyncio.Future | None = None  # see _warm_cgroup_attach
        self._status_cache: dict[str, tuple[SandboxRecord, tuple, pb.PodSandboxStatus]] = {}  # sandbox_status
        self.pod_cidr = ""
        for d in ("sandboxes", "containers", "trash"):
            (opts.state_dir / d).mkdir(parents=True, exist_ok=True)

    # -- paths -----------------------------------------------------------------------------------
    def _sdir(self, sid: str) -> Path:
        return self.opts.state_dir / "sandboxes" / sid

    def _cdir(self, cid: str) -> Path:
        return self.opts.state_dir / "containers" / cid

    def container_dir(self, c: ContainerRecord) -> Path:
        """Where a container's stdin and control FIFOs live (for the streaming server's attach)."""
        return self._cdir(c.id)

    def output_log(self, c: ContainerRecord) -> str:
        """Where the shim writes a container's output and Attach follows it: the CRI log the caller named,
        else, for a container with stdin (interactive: attach expected), a private log in its state dir,
        as containerd serves attach without a log path; else nowhere ("")."""
        if c.log_path:
            return c.log_path
        return str(self._cdir(c.id) / "attach.log") if self.container_config(c).stdin else ""

    def _warm_cgroup_attach(self) -> None:
        """Start the kernel's cgroup-attach grace period now, on a worker thread (cgroups/base.py
        warm_attach): the pause or container process joining its cgroup a few milliseconds later then
        finds it passed or under way, instead of waiting a whole one (3-15 ms) on the request path."""
        if self._warming is None or self._warming.done():
            self._warming = asyncio.get_running_loop().run_in_executor(None, self.cgroups.warm_attach)
            self._warming.add_done_callback(lambda f: f.cancelled() or f.exception())

    def _lock(self, key: str) -> asyncio.Lock:
        return self._locks.setdefault(key, asyncio.Lock())

    def _persist_sandbox(self, s: SandboxRecord) -> None:
        save(self._sdir(s.id) / "sandbox.json", s)

    def _persist_container(self, c: ContainerRecord) -> None:
        save(self._cdir(c.id) / "container.json", c)

    # -- lookups ---------------------------------------------------------------------------------
    def _find(self, table: dict, ident: str, what: str):
        if not ident:
            raise InvalidArgument(f"{what} id is required")
        if ident in table:
            return table[ident]
        matches = [v for k, v in table.items() if k.startswith(ident)]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise InvalidArgument(f"{what} id prefix {ident!r} is ambiguous")
        raise NotFound(f"{what} {ident!r} not found")

    def sandbox(self, sid: str) -> SandboxRecord:
        return self._find(self.sandboxes, sid, "sandbox")

    def container(self, cid: str) -> ContainerRecord:
        return self._find(self.containers, cid, "container")

    @staticmethod
    def sandbox_config(s: SandboxRecord) -> pb.PodSandboxConfig:
        """The sandbox's config, read-only (parsed once per record: every status and every label-filtered
        List asks for it, and the kubelet lists on each relist and pod sync)."""
        return _parsed_sandbox_config(s.config)

    @staticmethod
    def container_config(c: ContainerRecord) -> pb.ContainerConfig:
        """The container's config, read-only (parsed once, as sandbox_config)."""
        return _parsed_container_config(c.config)

    # -- start-up: recover and reconcile ----------------------------------------------------------
    async def start(self) -> None:
        await asyncio.to_thread(_empty_dir, self.opts.state_dir / "trash")
        for d in sorted((self.opts.state_dir / "sandboxes").iterdir()):
            s = load(d / "sandbox.json", SandboxRecord)
            if s is None:
                await asyncio.to_thread(_remove_tree, d)  # half-made before a crash: never reported
                continue
            self.sandboxes[s.id] = s
            self._keys[s.key] = s.id
            if s.state == SANDBOX_READY:
                if alive(s.pid, s.pid_start):
                    self._watch(s.pid, lambda s=s: self._on_pause_exit(s))
                else:
                    s.state = SANDBOX_NOTREADY
                    self._persist_sandbox(s)
        for d in sorted((self.opts.state_dir / "containers").iterdir()):
            c = load(d / "container.json", ContainerRecord)
            if c is None or c.sandbox_id not in self.sandboxes:
                await asyncio.to_thread(self._cleanup_orphan_container_dir, d, c)
                continue
            self.containers[c.id] = c
            self._keys[c.key] = c.id
            self._exited[c.id] = asyncio.Event()
            if c.state == RUNNING:
                if alive(c.shim_pid, c.shim_start):
                    self._watch(c.shim_pid, lambda c=c: self._on_container_exit(c))
                else:
                    self._on_container_exit(c)
            elif c.state in (EXITED, UNKNOWN):
                self._exited[c.id].set()
        log.info("recovered %d sandboxes and %d containers", len(self.sandboxes), len(self.containers))

    def _cleanup_orphan_container_dir(self, d: Path, c: ContainerRecord | None) -> None:
        rootfs = d / "rootfs"
        with contextlib.suppress(OSError):
            if os.path.ismount(rootfs):
                sc.umount(str(rootfs), sc.MNT_DETACH)
        _remove_tree(d)

    async def close(self) -> None:
        """Stop watching; leave every sandbox and container running (the runtime outlives the daemon)."""
        for t in list(self._releases.values()):
            with contextlib.suppress(Exception):
                await t
        self._releases.clear()
        if self._warming is not None:
            with contextlib.suppress(Exception):
                await self._warming
        loop = asyncio.get_running_loop()
        for fd in list(self._watches):
            loop.remove_reader(fd)
            os.close(fd)
        self._watches.clear()

    # -- exit watching ---------------------------------------------------------------------------
    def _watch(self, pid: int, callback: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            loop.call_soon(callback)
            return

        def ready() -> None:
            loop.remove_reader(fd)
            self._watches.pop(fd, None)
            os.close(fd)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # ours if we started it in this daemon's lifetime
            callback()

        self._watches[fd] = (pid, callback)
        loop.add_reader(fd, ready)

    def _on_pause_exit(self, s: SandboxRecord) -> None:
        if s.state == SANDBOX_READY and self.sandboxes.get(s.id) is s:
            s.state = SANDBOX_NOTREADY
            self._persist_sandbox(s)

    def _on_container_exit(self, c: ContainerRecord) -> None:
        if c.state != RUNNING or self.containers.get(c.id) is not c:
            return
        exit_file = self._cdir(c.id) / "exit"
        fields: dict[str, str] = {}
        with contextlib.suppress(OSError):
            for part in exit_file.read_text().split():
                k, _, v = part.partition("=")
                fields[k] = v
        if fields:
            c.exit_code = int(fields.get("code", 255))
            c.finished_at = int(fields.get("finished", now_ns()))
            if fields.get("signal") == str(int(signal.SIGKILL)) and self.cgroups.oom_kills(c.cgroup) > 0:
                c.reason = "OOMKilled"
            elif not c.reason:
                c.reason = "Completed" if c.exit_code == 0 else "Error"
            c.state = EXITED
        else:
            c.exit_code, c.finished_at = 255, now_ns()
            c.state, c.reason, c.message = EXITED, "Unknown", "the container's shim exited without recording a status"
        self._persist_container(c)
        self._exited.setdefault(c.id, asyncio.Event()).set()
        # Like containerd deleting the task on exit: free the rootfs mount and the cgroup now, so
        # RemoveContainer later only forgets the record and its files.
        self._background(c.id, self._release_kernel_objects, c)
        self._emit(c, pb.CONTAINER_STOPPED_EVENT)

    def _background(self, key: str, fn: Callable[..., Any], *args: Any) -> None:
        """Run blocking cleanup off the request path; owned here (awaited by close() or by the next
        operation on the same object), and forgotten once done."""
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(fn, *args), name=key[:24])
        self._releases[key] = task

        def done(t: asyncio.Task) -> None:
            if self._releases.get(key) is t:
                del self._releases[key]
            if not t.cancelled() and t.exception() is not None:
                log.warning("background cleanup %s failed: %s", key, t.exception())

        task.add_done_callback(done)

    # -- events ----------------------------------------------------------------------------------
    def _emit(self, c: ContainerRecord, kind: int) -> None:
        if not self._subscribers:
            return
        ev = pb.ContainerEventResponse(container_id=c.id, container_event_type=kind, created_at=now_ns())
        s = self.sandboxes.get(c.sandbox_id)
        if s:
            ev.pod_sandbox_status.CopyFrom(self.sandbox_status(s))
        if kind != pb.CONTAINER_DELETED_EVENT:
            ev.containers_statuses.append(self.container_status(c))
        for q in self._subscribers:
            with contextlib.suppress(asyncio.QueueFull):
                q.put_nowait(ev)

    async def events(self) -> AsyncIterator[pb.ContainerEventResponse]:
        q: asyncio.Queue = asyncio.Queue(maxsize=1000)
        self._subscribers.append(q)
        try:
            while True:
                yield await q.get()
        finally:
            self._subscribers.remove(q)

    # -- pod sandboxes ---------------------------------------------------------------------------
    async def run_pod_sandbox(self, config: pb.PodSandboxConfig, handler: str) -> str:
        md = config.metadata
        if not config.HasField("metadata") or not md.name:
            raise InvalidArgument("config.metadata.name is required")
        if not md.namespace:
            raise InvalidArgument("config.metadata.namespace is required")
        if handler not in ("", "runc", "nodeagent"):
            raise InvalidArgument(f"runtime_handler: unknown handler {handler!r}")
        sec = config.linux.security_context
        nso = sec.namespace_options
        if nso.HasField("userns_options") and nso.userns_options.mode == POD:
            raise Unimplemented("user namespaces are not supported by this runtime")
        if sec.HasField("run_as_group") and not sec.HasField("run_as_user"):
            raise InvalidArgument("config.linux.security_context.run_as_group requires run_as_user")
        if nso.network not in (POD, NODE):
            raise InvalidArgument("config.linux.security_context.namespace_options.network must be POD or NODE")
        if nso.network == POD and config.hostname and len(config.hostname) > 64:
            raise InvalidArgument("config.hostname: longer than 64 characters")
        _check_sysctls(dict(config.linux.sysctls), nso)
        for pm in config.port_mappings:
            if not 0 <= pm.host_port <= 65535 or not 0 <= pm.container_port <= 65535:
                raise InvalidArgument("config.port_mappings: ports must be within 0-65535")
        key = f"{md.name}_{md.namespace}_{md.uid}_{md.attempt}"
        if key in self._keys:
            raise AlreadyExists(f"sandbox name {key!r} is reserved for {self._keys[key]}")
        sid = secrets.token_hex(32)
        self._keys[key] = sid
        undo = Undo()
        undo.push(lambda: self._keys.pop(key, None))
        try:
            async with self._lock(sid):
                s = await self._make_sandbox(sid, key, config, handler, undo)
        except BaseException:
            await undo.run()
            raise
        self.sandboxes[sid] = s
        self._watch(s.pid, lambda: self._on_pause_exit(s))
        self.sandbox_status(s)  # built now, off the status path: the kubelet asks for it next (the IP)
        return sid

    async def _make_sandbox(self, sid: str, key: str, config: pb.PodSandboxConfig, handler: str,
                            undo: Undo) -> SandboxRecord:
        nso = config.linux.security_context.namespace_options
        d = self._sdir(sid)
        d.mkdir()
        undo.push(lambda: _remove_tree(d))
        hostname = config.hostname if nso.network == POD else os.uname().nodename
        s = SandboxRecord(id=sid, key=key, created_at=now_ns(), config=encode(config.SerializeToString()),
                          runtime_handler=handler, net_mode=nso.network, ipc_mode=nso.ipc,
                          pid_mode=POD if nso.pid == POD else (NODE if nso.pid == NODE else CONTAINER),
                          hostname=hostname or sid[:12])
        await asyncio.to_thread(_write_pod_files, d, s.hostname, config.dns_config, nso.network == NODE)
        if nso.ipc != NODE:
            shm = d / "shm"
            shm.mkdir()
            sc.mount("shm", str(shm), "tmpfs", sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC, "mode=1777,size=65536k")
            undo.push(lambda: sc.umount(str(shm), sc.MNT_DETACH))
            s.shm = str(shm)
        parent = config.linux.cgroup_parent or f"{DEFAULT_CGROUP_PARENT}/{sid}"
        s.pod_cgroup = parent
        s.cgroup = f"{parent}/{sid}"
        s.made_cgroups = await asyncio.to_thread(self.cgroups.create, s.cgroup)
        undo.push(lambda: self._remove_cgroups(s))
        self._warm_cgroup_attach()  # pause joins the cgroup once it runs
        # pause: new net/ipc/uts namespaces (and pid when the pod shares one), hostname, loopback up.
        argv = [self.opts.pause]
        if nso.network != NODE:
            argv += ["-n", "-l"]
        if nso.ipc != NODE:
            argv.append("-i")
        if nso.network != NODE:
            argv += ["-u", "-H", s.hostname]
        if s.pid_mode == POD:
            argv.append("-p")
        for k, v in sorted(config.linux.sysctls.items()):
            argv += ["-s", f"{k}={v}"]
        s.pid = await asyncio.to_thread(_start_pause, argv)
        s.pid_start = proc_start(s.pid)
        pid = s.pid
        undo.push(lambda: _kill_wait(pid))
        # Joining the cgroup may wait for an RCU grace period (warm_attach in cgroups/base.py): it runs
        # beside the CNI ADD, which needs only the network namespace pause now holds.
        joined = asyncio.get_running_loop().run_in_executor(None, _join_cgroup, pid,
                                                            self.cgroups.procs_files(s.cgroup))
        try:
            if nso.network != NODE and self.cni is not None and self.cni.network() is not None:
                att = self._attachment(s, config)
                result = await self.cni.add(att)
                s.network = True
                undo.push(lambda: self.cni.delete(att))
                from cni.invoke import first_ip

                s.ip, s.additional_ips = first_ip(result)
                if s.ip:
                    await asyncio.to_thread(_add_host_entry, d / "hosts", s.ip, s.hostname)
        except BaseException:
            await asyncio.gather(joined, return_exceptions=True)
            raise
        await joined
        self._persist_sandbox(s)
        return s

    def _attachment(self, s: SandboxRecord, config: pb.PodSandboxConfig):
        from cni.invoke import Attachment

        md = config.metadata
        netns = f"/proc/{s.pid}/ns/net" if alive(s.pid, s.pid_start) else str(self._sdir(s.id) / "netns-gone")
        ports = [{"hostPort": p.host_port, "containerPort": p.container_port,
                  "protocol": pb.Protocol.Name(p.protocol).lower(), "hostIP": p.host_ip}
                 for p in config.port_mappings if p.host_port > 0]
        cap = {"portMappings": ports} if ports else {}
        args = (("IgnoreUnknown", "1"), ("K8S_POD_NAMESPACE", md.namespace), ("K8S_POD_NAME", md.name),
                ("K8S_POD_INFRA_CONTAINER_ID", s.id), ("K8S_POD_UID", md.uid))
        return Attachment(container_id=s.id, netns=netns, ifname="eth0", args=args, capability_args=cap)

    def _remove_cgroups(self, s: SandboxRecord) -> None:
        """Remove the pause leaf and the parents this sandbox made, unless another sandbox still uses one:
        then that sandbox inherits it, so the last user removes it."""
        self.cgroups.remove(s.cgroup)
        for path in reversed(s.made_cgroups):
            if path == s.cgroup:
                continue
            heir = next((o for o in self.sandboxes.values()
                         if o is not s and (o.pod_cgroup == path or o.pod_cgroup.startswith(path + "/"))), None)
            if heir is not None:
                if path not in heir.made_cgroups:
                    heir.made_cgroups.insert(0, path)
                    self._persist_sandbox(heir)
                continue
            with contextlib.suppress(OSError):
                self.cgroups.remove(path)

    async def stop_pod_sandbox(self, sid: str) -> None:
        try:
            s = self.sandbox(sid)
        except NotFound:
            return  # idempotent: an unknown sandbox is already stopped
        for c in [c for c in self.containers.values() if c.sandbox_id == s.id]:
            await self.stop_container(c.id, 0)
        async with self._lock(s.id):
            config = self.sandbox_config(s)
            if s.network and self.cni is not None:
                await self.cni.delete(self._attachment(s, config))
                s.network = False
                self._persist_sandbox(s)
            if alive(s.pid, s.pid_start):
                await asyncio.to_thread(_kill_wait, s.pid)
            for pid in self.cgroups.pids(s.cgroup):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if s.shm:
                await asyncio.to_thread(_umount_if_mounted, s.shm)
            s.state = SANDBOX_NOTREADY
            self._persist_sandbox(s)

    async def remove_pod_sandbox(self, sid: str) -> None:
        try:
            s = self.sandbox(sid)
        except NotFound:
            return
        await self.stop_pod_sandbox(s.id)
        for c in [c for c in self.containers.values() if c.sandbox_id == s.id]:
            await self.remove_container(c.id)
        async with self._lock(s.id):
            if s.id not in self.sandboxes:
                return
            await asyncio.to_thread(self._remove_cgroups, s)
            await asyncio.to_thread(_remove_tree, self._sdir(s.id))
            del self.sandboxes[s.id]
            self._keys.pop(s.key, None)
            self._status_cache.pop(s.id, None)
        self._locks.pop(s.id, None)

    def sandbox_status(self, s: SandboxRecord) -> pb.PodSandboxStatus:
        """The sandbox's status, read-only: built once per change of its mutable facts (state, IPs) and
        shared, since the kubelet asks for it on every pod sync (building it cost 40 us a call)."""
        key = (s.state, s.ip, tuple(s.additional_ips))
        hit = self._status_cache.get(s.id)
        if hit is not None and hit[0] is s and hit[1] == key:
            return hit[2]
        st = self._build_sandbox_status(s)
        self._status_cache[s.id] = (s, key, st)
        return st

    def _build_sandbox_status(self, s: SandboxRecord) -> pb.PodSandboxStatus:
        config = self.sandbox_config(s)
        st = pb.PodSandboxStatus(id=s.id, metadata=config.metadata, created_at=s.created_at,
                                 state=pb.SANDBOX_READY if s.state == SANDBOX_READY else pb.SANDBOX_NOTREADY,
                                 runtime_handler=s.runtime_handler)
        st.labels.update(config.labels)
        st.annotations.update(config.annotations)
        if s.net_mode != NODE:
            st.network.ip = s.ip
            for ip in s.additional_ips:
                st.network.additional_ips.add(ip=ip)
        opts = st.linux.namespaces.options
        opts.network, opts.ipc = s.net_mode, s.ipc_mode
        opts.pid = s.pid_mode
        return st

    def list_sandboxes(self, f: pb.PodSandboxFilter | None) -> list[SandboxRecord]:
        out = []
        for s in self.sandboxes.values():
            if f is not None:
                if f.id and not s.id.startswith(f.id):
                    continue
                if f.HasField("state") and (f.state.state == pb.SANDBOX_READY) != (s.state == SANDBOX_READY):
                    continue
                if f.label_selector:
                    labels = self.sandbox_config(s).labels
                    if any(labels.get(k) != v for k, v in f.label_selector.items()):
                        continue
            out.append(s)
        return out

    # -- containers ------------------------------------------------------------------------------
    async def create_container(self, sid: str, config: pb.ContainerConfig,
                               sandbox_config: pb.PodSandboxConfig | None) -> str:
        if not config.HasField("metadata") or not config.metadata.name:
            raise InvalidArgument("config.metadata.name is required")
        if not config.image.image:
            raise InvalidArgument("config.image.image is required")
        s = self.sandbox(sid)
        if s.state != SANDBOX_READY:
            raise FailedPrecondition(f"sandbox {s.id} is not ready")
        if self.images is None:
            raise Unimplemented("the image store is not available in this build")
        key = f"{config.metadata.name}_{s.key}_{config.metadata.attempt}"
        if key in self._keys:
            raise AlreadyExists(f"container name {key!r} is reserved for {self._keys[key]}")
        _validate_resources(config.linux.resources, "config.linux.resources")
        sec = config.linux.security_context
        if sec.HasField("run_as_group") and not (sec.HasField("run_as_user") or sec.run_as_username):
            raise InvalidArgument("config.linux.security_context.run_as_group requires run_as_user or run_as_username")
        if sec.HasField("run_as_user") and sec.run_as_username:
            raise InvalidArgument("config.linux.security_context: run_as_user and run_as_username are exclusive")
        if sec.namespace_options.pid == TARGET:
            raise Unimplemented("namespace_options.pid TARGET is not supported by this runtime")
        _seccomp_choice(sec)  # refuses what it cannot do before anything is made
        apparmor = await self._apparmor_choice(sec)
        mounts = [cfglib.check_mount_paths(m.container_path, m.host_path, i) for i, m in enumerate(config.mounts)]
        for i, m in enumerate(config.mounts):
            if m.recursive_read_only:
                _check_recursive_ro(m, f"config.mounts[{i}]")
        devices = [_device(d, i) for i, d in enumerate(config.devices)]
        image = self.images.resolve(config.image.image)
        if image is None:
            raise NotFound(f"image {config.image.image!r} not found")
        argv = cfglib.command(image.config, list(config.command), list(config.args))
        caps = capslib.resolve(list(sec.capabilities.add_capabilities), list(sec.capabilities.drop_capabilities),
                               sec.privileged, sc.last_cap())
        cid = secrets.token_hex(32)
        self._keys[key] = cid
        undo = Undo()
        undo.push(lambda: self._keys.pop(key, None))
        try:
            c = await self._make_container(cid, key, s, config, image, argv, caps, mounts, devices, apparmor, undo)
        except BaseException:
            await undo.run()
            raise
        self.containers[cid] = c
        self._exited[cid] = asyncio.Event()
        self._emit(c, pb.CONTAINER_CREATED_EVENT)
        return cid

    async def _make_container(self, cid: str, key: str, s: SandboxRecord, config: pb.ContainerConfig, image: Any,
                              argv: list[str], caps: list[str], mount_sources: list[str], devices: list[dict],
                              apparmor: str, undo: Undo) -> ContainerRecord:
        d = self._cdir(cid)
        rootfs = d / "rootfs"
        sec = config.linux.security_context
        cgroup = f"{s.pod_cgroup}/{cid}"
        res = _resources(config.linux.resources)
        sconfig = self.sandbox_config(s)
        log_path = ""
        if config.log_path and sconfig.log_directory:
            log_path = os.path.join(sconfig.log_directory, config.log_path)

        def prepare() -> tuple[int, int, list[int]]:
            """The blocking part in one worker-thread hop: directories, rootfs, user, cgroup."""
            d.mkdir()
            undo.push(lambda: _remove_tree(d))
            upper, work = d / "upper", d / "work"
            for p in (rootfs, upper, work):
                p.mkdir()
            lower = ":".join(str(p) for p in reversed(image.layers))
            sc.mount("overlay", str(rootfs), "overlay", 0, f"lowerdir={lower},upperdir={upper},workdir={work}")
            undo.push(lambda: sc.umount(str(rootfs), sc.MNT_DETACH))
            user = cfglib.resolve_user(
                str(rootfs), image.config.get("User", ""),
                sec.run_as_user.value if sec.HasField("run_as_user") else None,
                sec.run_as_group.value if sec.HasField("run_as_group") else None,
                sec.run_as_username, list(sec.supplemental_groups))
            self.cgroups.create(cgroup)
            undo.push(lambda: self.cgroups.remove(cgroup))
            self.cgroups.apply(cgroup, res)
            if not sec.privileged:
                allow = DEFAULT_DEVICE_RULES + [f"{x['kind']} {x['major']}:{x['minor']} {x['permissions']}"
                                                for x in devices]
                self.cgroups.restrict_devices(cgroup, allow)
            if log_path:
                os.makedirs(os.path.dirname(log_path), exist_ok=True)
            return user

        uid, gid, groups = await asyncio.to_thread(prepare)
        self._warm_cgroup_attach()  # after the mkdirs: a pending attach holds cgroup_mutex
        sd = self._sdir(s.id)
        mounts = []
        targets = {m.container_path for m in config.mounts}
        for name in ("hosts", "hostname", "resolv.conf"):
            if f"/etc/{name}" not in targets:
                mounts.append({"source": str(sd / name), "target": f"/etc/{name}", "readonly": False, "propagation": 0})
        for m, src in zip(config.mounts, mount_sources, strict=True):
            mounts.append({"source": src, "target": m.container_path, "readonly": m.readonly,
                           "propagation": m.propagation, "recursive_ro": m.recursive_read_only})
        pid_mode = sec.namespace_options.pid
        launch_doc = {
            "argv": argv,
            "env": cfglib.environment(image.config, [(e.key, e.value) for e in config.envs], s.hostname),
            "cwd": config.working_dir or image.config.get("WorkingDir") or "/",
            "uid": uid, "gid": gid, "groups": groups, "caps": capslib.mask(caps),
            "no_new_privs": sec.no_new_privs, "privileged": sec.privileged,
            "readonly_rootfs": sec.readonly_rootfs,
            "masked": list(sec.masked_paths) if sec.masked_paths else list(cfglib.MASKED_PATHS),
            "readonly_paths": list(sec.readonly_paths) if sec.readonly_paths else list(cfglib.READONLY_PATHS),
            "mounts": mounts,
            "pid_mode": "host" if pid_mode == NODE else ("join" if pid_mode == POD and s.pid_mode == POD else "new"),
            "oom_score_adj": config.linux.resources.oom_score_adj,
            "seccomp": _seccomp_choice(sec),
            "apparmor": apparmor,
            "devices": devices,
        }
        image_ref = image.repo_digests[0] if image.repo_digests else image.id
        c = ContainerRecord(id=cid, sandbox_id=s.id, key=key, created_at=now_ns(),
                            config=encode(config.SerializeToString()), image=config.image.image,
                            image_id=image.id, image_ref=image_ref, rootfs=str(rootfs), cgroup=cgroup,
                            log_path=log_path, launch=launch_doc, resources=dataclasses.asdict(res))
        self._persist_container(c)
        return c

    @staticmethod
    async def _apparmor_choice(sec: pb.LinuxContainerSecurityContext) -> str:
        """The AppArmor profile the container's processes run under ("" = none), refusing an
        unloaded Localhost profile and loading our RuntimeDefault one if the kernel lacks it."""
        choice = aalib.choose(sec, aalib.host_supports())
        if choice.kind == "localhost":
            aalib.check_loaded(choice.name)  # a short securityfs read
        elif choice.kind == "default" and not aalib.default_loaded():
            await asyncio.to_thread(aalib.ensure_default)  # apparmor_parser, once
        return choice.profile

    @staticmethod
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

    def _launch_spec(self, c: ContainerRecord, s: SandboxRecord) -> LaunchSpec:
        L = c.launch
        join = []
        if s.net_mode != NODE:
            join += [("net", f"/proc/{s.pid}/ns/net"), ("uts", f"/proc/{s.pid}/ns/uts")]
        if s.ipc_mode != NODE:
            join.append(("ipc", f"/proc/{s.pid}/ns/ipc"))
        adj = L.get("oom_score_adj") or 0
        # restrict_oom_score_adj (containerd): without CAP_SYS_RESOURCE we may not go below our own.
        own = int(Path("/proc/self/oom_score_adj").read_text())
        cfg = self.container_config(c)
        stdin_path, ctl_path = stdio.prepare(self._cdir(c.id), cfg.stdin, cfg.tty)
        return LaunchSpec(
            argv=tuple(L["argv"]), env=tuple(L["env"]), cwd=L["cwd"],
            creds=self.creds(c),
            rootfs=c.rootfs,
            mounts=tuple(Mount(m["source"], m["target"], m["readonly"], PROPAGATION.get(m["propagation"], sc.MS_PRIVATE),
                               m.get("recursive_ro", False))
                         for m in L["mounts"]),
            masked_paths=tuple(L["masked"]), readonly_paths=tuple(L["readonly_paths"]),
            readonly_rootfs=L["readonly_rootfs"], privileged=L["privileged"], join_ns=tuple(join),
            pid_mode=L["pid_mode"], pid_ns_path=f"/proc/{s.pid}/ns/pid", shm_source=s.shm,
            devices=tuple((d["path"], d["mode"], d["major"], d["minor"]) for d in L.get("devices", [])),
            cgroup_procs=tuple(self.cgroups.procs_files(c.cgroup)),
            oom_score_adj=max(adj, own) if adj or own else None,
            shim=self.opts.shim, launcher=self.opts.launcher, exit_file=str(self._cdir(c.id) / "exit"), log_path=self.output_log(c),
            stdin_path=stdin_path, ctl_path=ctl_path, tty=cfg.tty)

    async def start_container(self, cid: str) -> None:
        c = self.container(cid)
        async with self._lock(c.id):
            if c.state != CREATED:
                raise FailedPrecondition(f"container {c.id} is {c.state.lower()}, not created")
            s = self.sandboxes.get(c.sandbox_id)
            if s is None or s.state != SANDBOX_READY or not alive(s.pid, s.pid_start):
                raise FailedPrecondition(f"sandbox {c.sandbox_id} is not ready")
            self._warm_cgroup_attach()

            def start() -> tuple[Any, int, int]:
                """One worker-thread hop: the spec (it reads and makes files), the launch, the start times."""
                launched = launch(self._launch_spec(c, s))
                return launched, proc_start(launched.pid), proc_start(launched.shim_pid)

            try:
                launched, pid_start, shim_start = await asyncio.to_thread(start)
            except LaunchError as e:
                c.state, c.exit_code, c.reason, c.message = EXITED, 128, "StartError", str(e)
                c.started_at = c.finished_at = now_ns()
                self._persist_container(c)
                self._exited[c.id].set()
                raise StartError(f"failed to start container {c.id}: {e}") from e
            c.pid, c.pid_start = launched.pid, pid_start
            c.shim_pid, c.shim_start = launched.shim_pid, shim_start
            c.state, c.started_at = RUNNING, now_ns()
            self._persist_container(c)
            self._watch(c.shim_pid, lambda: self._on_container_exit(c))
        self._emit(c, pb.CONTAINER_STARTED_EVENT)

    async def stop_container(self, cid: str, grace: int) -> None:
        try:
            c = self.container(cid)
        except NotFound:
            return  # idempotent
        async with self._lock(c.id):
            if c.state != RUNNING:
                return
            ev = self._exited[c.id]
            if grace > 0 and alive(c.pid, c.pid_start):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(c.pid, signal.SIGTERM)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(grace):
                        await ev.wait()
            if not ev.is_set():
                for pid in [c.pid, *self.cgroups.pids(c.cgroup)]:
                    if pid == c.pid and not alive(c.pid, c.pid_start):
                        continue
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                try:
                    async with asyncio.timeout(30):
                        await ev.wait()
                except TimeoutError as e:
                    raise FailedPrecondition(f"container {c.id} did not exit after SIGKILL") from e

    async def remove_container(self, cid: str) -> None:
        try:
            c = self.container(cid)
        except NotFound:
            return
        if c.state == RUNNING:
            await self.stop_container(c.id, 0)
        async with self._lock(c.id):
            if c.id not in self.containers:
                return
            release = self._releases.pop(c.id, None)
            if release is not None:
                with contextlib.suppress(Exception):
                    await release
            trash = await asyncio.to_thread(self._destroy_container_files, c)
            del self.containers[c.id]
            self._keys.pop(c.key, None)
            self._exited.pop(c.id, None)
        self._locks.pop(c.id, None)
        if trash is not None:  # the (unmounted) upper/work dirs are deleted off the request path
            self._background(f"trash-{c.id}", _remove_tree, trash)
        self._emit(c, pb.CONTAINER_DELETED_EVENT)

    def _release_kernel_objects(self, c: ContainerRecord) -> None:
        """Kill leftovers, unmount the rootfs, remove the cgroup: idempotent, "gone" is success."""
        for pid in self.cgroups.pids(c.cgroup):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if os.path.ismount(c.rootfs):
            sc.umount(c.rootfs, sc.MNT_DETACH)
        self.cgroups.remove(c.cgroup)

    def _destroy_container_files(self, c: ContainerRecord) -> Path | None:
        """Free the kernel objects, delete the log, and move the container's directory to the trash."""
        self._release_kernel_objects(c)
        if c.log_path:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):  # never made, or its dir is gone
                os.unlink(c.log_path)
        trash = self.opts.state_dir / "trash" / c.id
        try:
            os.rename(self._cdir(c.id), trash)
        except FileNotFoundError:
            return None
        return trash

    def container_status(self, c: ContainerRecord) -> pb.ContainerStatus:
        config = self.container_config(c)
        state = {CREATED: pb.CONTAINER_CREATED, RUNNING: pb.CONTAINER_RUNNING,
                 EXITED: pb.CONTAINER_EXITED}.get(c.state, pb.CONTAINER_UNKNOWN)
        st = pb.ContainerStatus(id=c.id, metadata=config.metadata, state=state, created_at=c.created_at,
                                started_at=c.started_at, finished_at=c.finished_at, exit_code=c.exit_code,
                                image=pb.ImageSpec(image=c.image), image_ref=c.image_ref, image_id=c.image_id,
                                reason=c.reason, message=c.message, log_path=c.log_path)
        st.labels.update(config.labels)
        st.annotations.update(config.annotations)
        st.mounts.extend(config.mounts)
        r = c.resources
        lin = st.resources.linux
        lin.cpu_period, lin.cpu_quota, lin.cpu_shares = r.get("cpu_period", 0), r.get("cpu_quota", 0), r.get("cpu_shares", 0)
        lin.memory_limit_in_bytes = r.get("memory_limit", 0)
        lin.cpuset_cpus, lin.cpuset_mems = r.get("cpuset_cpus", ""), r.get("cpuset_mems", "")
        u = st.user.linux
        u.uid, u.gid = c.launch["uid"], c.launch["gid"]
        u.supplemental_groups.extend(c.launch["groups"])
        return st

    def list_containers(self, f: pb.ContainerFilter | None) -> list[ContainerRecord]:
        out = []
        states = {CREATED: pb.CONTAINER_CREATED, RUNNING: pb.CONTAINER_RUNNING, EXITED: pb.CONTAINER_EXITED}
        for c in self.containers.values():
            if f is not None:
                if f.id and not c.id.startswith(f.id):
                    continue
                if f.pod_sandbox_id and not c.sandbox_id.startswith(f.pod_sandbox_id):
                    continue
                if f.HasField("state") and states.get(c.state, pb.CONTAINER_UNKNOWN) != f.state.state:
                    continue
                if f.label_selector:
                    labels = self.container_config(c).labels
                    if any(labels.get(k) != v for k, v in f.label_selector.items()):
                        continue
            out.append(c)
        return out

    async def update_resources(self, cid: str, linux: pb.LinuxContainerResources) -> None:
        c = self.container(cid)
        _validate_resources(linux, "linux")
        async with self._lock(c.id):
            if c.state not in (CREATED, RUNNING):
                raise FailedPrecondition(f"container {c.id} is not running")
            res = _resources(linux)
            await asyncio.to_thread(self.cgroups.apply, c.cgroup, res)
            c.resources = dataclasses.asdict(res)
            self._persist_container(c)

    async def reopen_log(self, cid: str) -> None:
        c = self.container(cid)
        if c.state != RUNNING or not alive(c.shim_pid, c.shim_start):
            raise FailedPrecondition(f"container {c.id} is not running")
        if not c.log_path:
            return
        os.kill(c.shim_pid, signal.SIGUSR1)
        for _ in range(100):
            if await asyncio.to_thread(os.path.exists, c.log_path):
                return
            await asyncio.sleep(0.01)
        raise FailedPrecondition(f"container {c.id}: the log was not reopened")

    async def exec_sync(self, cid: str, cmd: list[str], timeout_s: int) -> tuple[int, bytes, bytes]:
        c = self.container(cid)
        if not cmd:
            raise InvalidArgument("cmd is required")
        if c.state != RUNNING or not alive(c.pid, c.pid_start):
            raise FailedPrecondition(f"container {c.id} is not running")
        L = c.launch
        creds = self.creds(c)
        self._warm_cgroup_attach()
        try:
            r = await asyncio.to_thread(exec_in, c.pid, cmd, L["env"], L["cwd"], creds,
                                        self.cgroups.procs_files(c.cgroup), timeout_s or None)
        except LaunchError as e:
            raise FailedPrecondition(str(e)) from e
        if r.timed_out:
            raise TimeoutError(f"command {cmd!r} timed out after {timeout_s}s")
        return r.exit_code, r.stdout, r.stderr

    # -- stats -----------------------------------------------------------------------------------
    def container_stats(self, c: ContainerRecord) -> pb.ContainerStats:
        config = self.container_config(c)
        st = pb.ContainerStats()
        st.attributes.id = c.id
        st.attributes.metadata.CopyFrom(config.metadata)
        st.attributes.labels.update(config.labels)
        st.attributes.annotations.update(config.annotations)
        ts = now_ns()
        x = self.cgroups.stats(c.cgroup)
        st.cpu.timestamp = ts
        st.cpu.usage_core_nano_seconds.value = x.cpu_usage_ns
        st.memory.timestamp = ts
        st.memory.working_set_bytes.value = x.memory_working_set
        st.memory.usage_bytes.value = x.memory_usage
        st.memory.rss_bytes.value = x.memory_rss
        st.memory.page_faults.value = x.page_faults
        st.memory.major_page_faults.value = x.major_page_faults
        if x.memory_limit and x.memory_limit < (1 << 60):
            st.memory.available_bytes.value = max(0, x.memory_limit - x.memory_working_set)
        st.writable_layer.timestamp = ts
        st.writable_layer.fs_id.mountpoint = str(Path(c.rootfs).parent / "upper")
        used, inodes = _du(Path(c.rootfs).parent / "upper")
        st.writable_layer.used_bytes.value = used
        st.writable_layer.inodes_used.value = inodes
        return st

    def sandbox_stats(self, s: SandboxRecord) -> pb.PodSandboxStats:
        config = self.sandbox_config(s)
        st = pb.PodSandboxStats()
        st.attributes.id = s.id
        st.attributes.metadata.CopyFrom(config.metadata)
        st.attributes.labels.update(config.labels)
        st.attributes.annotations.update(config.annotations)
        ts = now_ns()
        x = self.cgroups.stats(s.pod_cgroup)
        st.linux.cpu.timestamp = ts
        st.linux.cpu.usage_core_nano_seconds.value = x.cpu_usage_ns
        st.linux.memory.timestamp = ts
        st.linux.memory.working_set_bytes.value = x.memory_working_set
        st.linux.memory.usage_bytes.value = x.memory_usage
        st.linux.memory.rss_bytes.value = x.memory_rss
        st.linux.process.timestamp = ts
        st.linux.process.process_count.value = x.pids
        for c in self.containers.values():
            if c.sandbox_id == s.id and c.state == RUNNING:
                st.linux.containers.append(self.container_stats(c))
        return st


# -- helpers (blocking; called through asyncio.to_thread where they touch the kernel) ---------------


def _validate_resources(r: pb.LinuxContainerResources, field: str) -> None:
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


# runc's default device allow-list: mknod of anything, and the standard /dev nodes plus ptys and tun.
DEFAULT_DEVICE_RULES = ["c *:* m", "b *:* m", "c 1:3 rwm", "c 1:5 rwm", "c 1:7 rwm", "c 1:8 rwm", "c 1:9 rwm",
                        "c 5:0 rwm", "c 5:1 rwm", "c 5:2 rwm", "c 136:* rwm", "c 10:200 rwm"]


def _device(d: pb.Device, index: int) -> dict:
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


IPC_SYSCTLS = ("kernel.shmmax", "kernel.shmall", "kernel.shmmni", "kernel.shm_rmid_forced", "kernel.msgmax",
               "kernel.msgmnb", "kernel.msgmni", "kernel.sem")


def _check_sysctls(sysctls: dict[str, str], nso: pb.NamespaceOption) -> None:
    """Only namespaced sysctls, and only for namespaces the pod owns (what runc accepts)."""
    for key in sysctls:
        name = key.replace("/", ".")
        field = f"config.linux.sysctls[{key!r}]"
        if name.startswith("net."):
            if nso.network == NODE:
                raise InvalidArgument(f"{field}: a net sysctl needs the pod's own network namespace")
        elif name in IPC_SYSCTLS or name.startswith("fs.mqueue."):
            if nso.ipc == NODE:
                raise InvalidArgument(f"{field}: an ipc sysctl needs the pod's own ipc namespace")
        elif name in ("kernel.domainname", "kernel.hostname"):
            if nso.network == NODE:
                raise InvalidArgument(f"{field}: a uts sysctl needs the pod's own uts namespace")
        else:
            raise InvalidArgument(f"{field}: not a namespaced sysctl; it would change the whole node")
        if "\n" in sysctls[key] or "=" in name:
            raise InvalidArgument(f"{field}: invalid value")


def _check_recursive_ro(m: pb.Mount, field: str) -> None:
    """CRI: a recursive read-only mount must be read-only and private (containerd/runc refuse the rest)."""
    if not m.readonly:
        raise InvalidArgument(f"{field}.recursive_read_only requires readonly")
    if m.propagation != pb.PROPAGATION_PRIVATE:
        raise InvalidArgument(f"{field}.recursive_read_only requires propagation PROPAGATION_PRIVATE")
    if not sc.supports_mount_setattr():
        raise InvalidArgument(f"{field}.recursive_read_only: the kernel has no mount_setattr (Linux >= 5.12)")


def _seccomp_choice(sec: pb.LinuxContainerSecurityContext) -> str:
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
        raise InvalidArgument(f"seccomp_profile_path: {path!r} is not runtime/default, unconfined or localhost/<path>")
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


def _resources(r: pb.LinuxContainerResources) -> Resources:
    unified = tuple(sorted(r.unified.items()))
    pids = 0
    for k, v in unified:
        if k == "pids.max":
            pids = -1 if v == "max" else int(v) if v.isdigit() else 0
    return Resources(cpu_period=r.cpu_period, cpu_quota=r.cpu_quota, cpu_shares=r.cpu_shares,
                     memory_limit=r.memory_limit_in_bytes, memory_swap_limit=r.memory_swap_limit_in_bytes,
                     cpuset_cpus=r.cpuset_cpus, cpuset_mems=r.cpuset_mems, pids_limit=pids,
                     unified=tuple((k, v) for k, v in unified if k != "pids.max"))


@functools.lru_cache(maxsize=1024)
def _parsed_sandbox_config(text: str) -> pb.PodSandboxConfig:
    return pb.PodSandboxConfig.FromString(decode(text))


@functools.lru_cache(maxsize=2048)
def _parsed_container_config(text: str) -> pb.ContainerConfig:
    return pb.ContainerConfig.FromString(decode(text))


def _start_pause(argv: list[str]) -> int:
    """Start pause detached; return its pid once it holds its namespaces."""
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True, close_fds=True)
    line = p.stdout.readline()
    p.stdout.close()
    try:
        pid = int(line)
    except ValueError:
        err = p.stderr.read().decode(errors="replace").strip()
        p.stderr.close()
        p.wait()
        raise FailedPrecondition(f"pause failed to start: {err or 'no output'}") from None
    p.stderr.close()
    if pid != p.pid:
        p.wait()  # -p: the parent exits once the pid-1 child runs
    else:
        p.returncode = 0  # reaped by the exit watcher, not by the Popen object
    return pid


def _join_cgroup(pid: int, procs_files: list[str]) -> None:
    """Move pause into its cgroup; on failure kill it, so it never outlives a failed RunPodSandbox."""
    try:
        for f in procs_files:
            with open(f, "w") as fh:
                fh.write(str(pid))
    except OSError as e:
        # e.g. ENOSPC joining a v1 cpuset cgroup with no cpus
        _kill_wait(pid)
        raise FailedPrecondition(f"pause could not join its cgroup ({f}): {e.strerror or e}") from None


def _kill_wait(pid: int, timeout: float = 10.0) -> None:
    start = proc_start(pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if proc_start(pid) != start or start == 0:
            return
        time.sleep(0.002)


def _umount_if_mounted(path: str) -> None:
    if os.path.ismount(path):
        sc.umount(path, sc.MNT_DETACH)


def _empty_dir(d: Path) -> None:
    for p in d.iterdir():
        _remove_tree(p)


def _remove_tree(d: Path) -> None:
    if d.exists():
        shutil.rmtree(d, ignore_errors=True)


def _du(d: Path) -> tuple[int, int]:
    used = inodes = 0
    for root, dirs, files in os.walk(d):
        for name in files + dirs:
            inodes += 1
            with contextlib.suppress(OSError):
                used += os.lstat(os.path.join(root, name)).st_size
    return used, inodes


def _write_pod_files(d: Path, hostname: str, dns: pb.DNSConfig, host_network: bool) -> None:
    (d / "hostname").write_text(hostname + "\n")
    if host_network:
        try:
            hosts = Path("/etc/hosts").read_text()
        except OSError:
            hosts = ""
    else:
        hosts = ("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
                 "fe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n")
    (d / "hosts").write_text(hosts)
    if dns.servers or dns.searches or dns.options:
        lines = [f"nameserver {s}" for s in dns.servers]
        if dns.searches:
            lines.append("search " + " ".join(dns.searches))
        if dns.options:
            lines.append("options " + " ".join(dns.options))
        resolv = "\n".join(lines) + "\n"
    else:
        try:
            resolv = Path("/etc/resolv.conf").read_text()
        except OSError:
            resolv = ""
    (d / "resolv.conf").write_text(resolv)


def _add_host_entry(hosts: Path, ip: str, hostname: str) -> None:
    with open(hosts, "a") as f:
        f.write(f"{ip}\t{hostname}\n")
