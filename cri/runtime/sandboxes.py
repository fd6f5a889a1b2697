"""RunPodSandbox, StopPodSandbox, RemovePodSandbox, PodSandboxStatus, ListPodSandbox.

A sandbox is a static pause process holding the pod's network, ipc and uts namespaces (and pid when the
pod shares one), in a cgroup of its own under the pod's, with the pod's /etc files and /dev/shm, and a
network from CNI.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import time
from pathlib import Path

from cni.invoke import NOT_INITIALIZED, Attachment, CNIError, first_ip
from cri.proto import api_pb2 as pb
from cri.runtime.core import (
    CONTAINER,
    HANDLERS,
    NODE,
    POD,
    RuntimeCore,
    Undo,
    make_or_undo,
    now_ns,
    remove_unmounted,
    selected,
)
from cri.runtime.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NetworkSetupFailed,
    NotFound,
    Unimplemented,
)
from cri.runtime.state import SandboxRecord, SandboxState, alive, encode, proc_start
from kernel import procs
from kernel import syscalls as sc

DEFAULT_CGROUP_PARENT = "/nodeagent"
IPC_SYSCTLS = ("kernel.shmmax", "kernel.shmall", "kernel.shmmni", "kernel.shm_rmid_forced", "kernel.msgmax",
               "kernel.msgmnb", "kernel.msgmni", "kernel.sem")


class SandboxVerbs(RuntimeCore):
    async def run_pod_sandbox(self, config: pb.PodSandboxConfig, handler: str) -> str:
        md = config.metadata
        if not config.HasField("metadata") or not md.name:
            raise InvalidArgument("config.metadata.name is required")
        if not md.namespace:
            raise InvalidArgument("config.metadata.namespace is required")
        if handler not in HANDLERS:
            raise InvalidArgument(f"runtime_handler: unknown handler {handler!r}")
        sec = config.linux.security_context
        nso = sec.namespace_options
        if nso.HasField("userns_options") and nso.userns_options.mode == POD:
            raise Unimplemented("user namespaces are not supported by this runtime")
        if sec.HasField("run_as_group") and not sec.HasField("run_as_user"):
            raise InvalidArgument("config.linux.security_context.run_as_group requires run_as_user")
        if nso.network not in (POD, NODE):
            raise InvalidArgument("config.linux.security_context.namespace_options.network must be POD or "
                                  "NODE")
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
        if nso.network != NODE and (self.cni is None or self.cni.network() is None):
            # containerd refuses a pod network while no CNI config is loaded (go-cni's Setup checks its
            # Status first); here before anything is made, so there is nothing to undo
            cause = NOT_INITIALIZED if self.cni is not None else "cni config not initialized"
            raise NetworkSetupFailed(sid, cause)
        self._keys[key] = sid
        undo = Undo()
        undo.push(lambda: self._keys.pop(key, None))

        async def make() -> SandboxRecord:
            async with self._lock(sid):
                return await self._make_sandbox(sid, key, config, handler, undo)

        s = await make_or_undo(make(), undo)
        self.sandboxes[sid] = s
        self._watch(s.pid, lambda: self._on_pause_exit(s))
        self.sandbox_status(s)  # built now, off the status path: the kubelet asks for it next (the IP)
        return sid

    async def _make_sandbox(self, sid: str, key: str, config: pb.PodSandboxConfig, handler: str,
                            undo: Undo) -> SandboxRecord:
        nso = config.linux.security_context.namespace_options
        d = self._sdir(sid)
        undo.push(lambda: asyncio.to_thread(remove_unmounted, d))  # first: goes last, unmounting what is left
        await asyncio.to_thread(d.mkdir)  # the filesystem's journal may be busy: not on the loop
        hostname = config.hostname if nso.network == POD else os.uname().nodename
        s = SandboxRecord(id=sid, key=key, created_at=now_ns(), config=encode(config.SerializeToString()),
                          runtime_handler=handler, net_mode=nso.network, ipc_mode=nso.ipc,
                          pid_mode=POD if nso.pid == POD else (NODE if nso.pid == NODE else CONTAINER),
                          hostname=hostname or sid[:12])
        made = self._make_record_file(sid, d / "sandbox.json", 2 * len(s.config) + 4096, undo)
        await asyncio.to_thread(_write_pod_files, d, s.hostname, config.dns_config, nso.network == NODE)
        if nso.ipc != NODE:
            shm = d / "shm"
            undo.push(lambda: _umount_if_mounted(str(shm)))  # first, as the directory's
            await asyncio.to_thread(_mount_shm, shm)
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
        s.pid, s.pid_start = await asyncio.to_thread(_start_pause, argv)
        pid = s.pid
        undo.push(lambda: _kill_wait(pid))
        # Joining the cgroup may wait for an RCU grace period (warm_attach in cgroups/base.py): it runs
        # beside the CNI ADD, which needs only the network namespace pause now holds.
        joined = asyncio.get_running_loop().run_in_executor(None, _join_cgroup, pid,
                                                            self.cgroups.procs_files(s.cgroup))
        try:
            cni = self.cni
            if nso.network != NODE and cni is not None:
                att = self._attachment(s, config)
                try:
                    result = await cni.add(att)
                except CNIError as e:  # a failed ADD may have allocated: undo with a DEL (containerd)
                    undo.push(lambda: cni.delete(att))
                    raise NetworkSetupFailed(sid, str(e)) from e
                s.network = True
                undo.push(lambda: cni.delete(att))

                s.ip, s.additional_ips = first_ip(result)
                if s.ip:
                    await asyncio.to_thread(_add_host_entry, d / "hosts", s.ip, s.hostname)
        except BaseException:
            await asyncio.gather(joined, return_exceptions=True)
            raise
        await joined
        await made
        await self._persist_off_loop(s)
        return s

    def _attachment(self, s: SandboxRecord, config: pb.PodSandboxConfig) -> Attachment:
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
                         if o is not s and (o.pod_cgroup == path or o.pod_cgroup.startswith(path + "/"))),
                        None)
            if heir is not None:
                if path not in heir.made_cgroups:
                    heir.made_cgroups.insert(0, path)
                    self._persist_sandbox(heir)
                continue
            with contextlib.suppress(OSError):
                self.cgroups.remove(path)

    def _on_pause_exit(self, s: SandboxRecord) -> None:
        if s.state.can_exit() and self.sandboxes.get(s.id) is s:
            s.state = SandboxState.NOTREADY
            self._persist_sandbox(s)

    async def stop_pod_sandbox(self, sid: str) -> None:
        try:
            s = self.sandbox(sid)
        except NotFound:
            return  # idempotent: an unknown sandbox is already stopped
        for c in [c for c in self.containers.values() if c.sandbox_id == s.id]:
            await self.stop_container(c.id, 0)
        async with self._lock(s.id):
            # Every step is idempotent and runs in any state: a sandbox whose pause died may still hold
            # its network, cgroup processes and /dev/shm.
            config = self.sandbox_config(s)
            if s.network and self.cni is not None:
                # Recorded with the state below, in the verb's one write: a crash before it repeats
                # the DEL on the next stop, and DEL of what is gone succeeds (CNI spec).
                await self.cni.delete(self._attachment(s, config))
                s.network = False
            if alive(s.pid, s.pid_start):
                await asyncio.to_thread(_kill_wait, s.pid)
            for pid in self.cgroups.pids(s.cgroup):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            if s.shm:
                await asyncio.to_thread(_umount_if_mounted, s.shm)
            s.state = SandboxState.NOTREADY
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
            await asyncio.to_thread(remove_unmounted, self._sdir(s.id))
            del self.sandboxes[s.id]
            self._keys.pop(s.key, None)
            self._status_cache.pop(s.id, None)
            self._files.pop(s.id, None)
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
                                 state=s.state.cri, runtime_handler=s.runtime_handler)
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
        sel = dict(f.label_selector) if f is not None else {}
        for s in self.sandboxes.values():
            if f is not None:
                if f.id and not s.id.startswith(f.id):
                    continue
                ready = s.state is SandboxState.READY
                if f.HasField("state") and (f.state.state == pb.SANDBOX_READY) != ready:
                    continue
                if sel and not selected(self.sandbox_labels(s), sel):
                    continue
            out.append(s)
        return out


# -- helpers (blocking; called through asyncio.to_thread where they touch the kernel) ---------------


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


def _mount_shm(shm: Path) -> None:
    """The pod's /dev/shm: a tmpfs of 64 MiB, as containerd's default."""
    shm.mkdir()
    sc.mount("shm", str(shm), "tmpfs", sc.MS_NOSUID | sc.MS_NODEV | sc.MS_NOEXEC, "mode=1777,size=65536k")


def _start_pause(argv: list[str]) -> tuple[int, int]:
    """Start pause detached; return its pid and start time once it holds its namespaces. Spawned as
    subprocess would (stdin /dev/null, stdout and stderr piped, its own session, no other fd, SIGPIPE and
    SIGXFSZ at their defaults), without holding the GIL while it starts (kernel.procs.spawn)."""
    path = argv[0] if "/" in argv[0] else shutil.which(argv[0]) or argv[0]
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    try:
        child = procs.spawn(path, argv, [(null, 0), (out_w, 1), (err_w, 2)], setsid=True, close_from=3,
                            default_signals=procs.RESTORED_SIGNALS)
    except OSError:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        for fd in (null, out_w, err_w):
            os.close(fd)
    with open(out_r, "rb") as out:
        line = out.readline()
    with open(err_r, "rb") as err:
        try:
            pid = int(line)
        except ValueError:
            text = err.read().decode(errors="replace").strip()
            _reap(child)
            raise FailedPrecondition(f"pause failed to start: {text or 'no output'}") from None
    if pid != child:
        _reap(child)  # -p: the parent exits once the pid-1 child runs
    # else: reaped by the exit watcher
    return pid, proc_start(pid)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


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
