"""CreateContainer, StartContainer, StopContainer, RemoveContainer, ContainerStatus, ListContainers,
UpdateContainerResources, ReopenContainerLog, and what a container's exit records.

A container is an overlayfs rootfs over the image's layers, a cgroup under its pod's, and, once started,
the static launcher that sets it up and becomes its shim; the shim writes its log and exit status, so
exits are learned (pidfd, then the exit file) also when they happened while the daemon was down.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import secrets
import signal
from pathlib import Path
from typing import Any

from cri.proto import api_pb2 as pb
from cri.runtime import caps as capslib
from cri.runtime import config as cfglib
from cri.runtime import image_mounts, spec, stdio
from cri.runtime.core import (
    NODE,
    TARGET,
    RuntimeCore,
    StartError,
    Undo,
    make_or_undo,
    now_ns,
    remove_tree,
    require,
    selected,
)
from cri.runtime.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, Unimplemented
from cri.runtime.process import LaunchError, LaunchSpec, launch
from cri.runtime.state import ContainerRecord, ContainerState, SandboxRecord, alive, encode, proc_start
from kernel import syscalls as sc


class ContainerVerbs(RuntimeCore):
    async def create_container(self, sid: str, config: pb.ContainerConfig,
                               sandbox_config: pb.PodSandboxConfig | None) -> str:
        if not config.HasField("metadata") or not config.metadata.name:
            raise InvalidArgument("config.metadata.name is required")
        if not config.image.image:
            raise InvalidArgument("config.image.image is required")
        s = self.sandbox(sid)
        require(s.state.can_create_container(), f"sandbox {s.id} is not ready")
        key = f"{config.metadata.name}_{s.key}_{config.metadata.attempt}"
        if key in self._keys:
            raise AlreadyExists(f"container name {key!r} is reserved for {self._keys[key]}")
        spec.validate_resources(config.linux.resources, "config.linux.resources")
        sec = config.linux.security_context
        if sec.HasField("run_as_group") and not (sec.HasField("run_as_user") or sec.run_as_username):
            raise InvalidArgument("config.linux.security_context.run_as_group requires run_as_user or "
                                  "run_as_username")
        if sec.HasField("run_as_user") and sec.run_as_username:
            raise InvalidArgument("config.linux.security_context: run_as_user and run_as_username are "
                                  "exclusive")
        if sec.namespace_options.pid == TARGET:
            self._check_pid_target(sec.namespace_options.target_id, s.id)
        spec.seccomp_choice(sec)  # refuses what it cannot do before anything is made
        apparmor = await spec.apparmor_choice(sec)
        if self.images is None:
            raise Unimplemented("the image store is not available in this build")
        mounts: list[str] = []
        image_vols = []
        host_paths: list[tuple[int, pb.Mount]] = []
        for i, m in enumerate(config.mounts):
            if image_mounts.is_image_mount(m):
                image_vols.append(image_mounts.check(m, i, self.images.resolve))
                mounts.append("")  # the image's overlay, made with the container
            else:
                image_mounts.check_sub_path_only(m, i)
                mounts.append("")
                host_paths.append((i, m))
        if host_paths:  # realpath walks every component of every path: in one worker-thread hop
            for (i, _), real in zip(host_paths, await asyncio.to_thread(_check_host_paths, host_paths),
                                    strict=True):
                mounts[i] = real
        for i, m in enumerate(config.mounts):
            if m.recursive_read_only:
                spec.check_recursive_ro(m, f"config.mounts[{i}]")
        devices = [spec.device(d, i) for i, d in enumerate(config.devices)]
        image = self.images.resolve(config.image.image)
        if image is None:
            raise NotFound(f"image {config.image.image!r} not found")
        argv = cfglib.command(image.config, list(config.command), list(config.args))
        caps = capslib.resolve(list(sec.capabilities.add_capabilities),
                               list(sec.capabilities.drop_capabilities), sec.privileged, sc.last_cap())
        if key in self._keys:  # reserved by a concurrent create while this one awaited its checks
            raise AlreadyExists(f"container name {key!r} is reserved for {self._keys[key]}")
        cid = secrets.token_hex(32)
        self._keys[key] = cid
        undo = Undo()
        undo.push(lambda: self._keys.pop(key, None))
        c = await make_or_undo(self._make_container(cid, key, s, config, image, argv, caps, mounts, devices,
                                                    apparmor, undo, image_vols), undo)
        self.containers[cid] = c
        self._exited[cid] = asyncio.Event()
        self._emit(c, pb.CONTAINER_CREATED_EVENT)
        return cid

    async def _make_container(self, cid: str, key: str, s: SandboxRecord, config: pb.ContainerConfig,
                              image: Any, argv: list[str], caps: list[str], mount_sources: list[str],
                              devices: list[dict], apparmor: str, undo: Undo,
                              image_vols: list[image_mounts.ImageVolume]) -> ContainerRecord:
        d = self._cdir(cid)
        rootfs = d / "rootfs"
        sec = config.linux.security_context
        cgroup = f"{s.pod_cgroup}/{cid}"
        res = spec.resources(config.linux.resources)
        sconfig = self.sandbox_config(s)
        log_path = ""
        if config.log_path and sconfig.log_directory:
            log_path = os.path.join(sconfig.log_directory, config.log_path)

        undo.push(lambda: remove_tree(d))  # first: it goes last, once the steps after it are undone
        await asyncio.to_thread(d.mkdir)  # the filesystem's journal may be busy: not on the loop
        made = self._make_record_file(cid, d / "container.json", 2 * config.ByteSize() + 8192, undo)

        def prepare() -> tuple[int, int, list[int]]:
            """The blocking part in one worker-thread hop: directories, rootfs, user, cgroup."""
            upper, work = d / "upper", d / "work"
            for p in (rootfs, upper, work):
                p.mkdir()
            lower = ":".join(str(p) for p in reversed(image.layers))
            sc.mount("overlay", str(rootfs), "overlay", 0,
                     f"lowerdir={lower},upperdir={upper},workdir={work}")
            undo.push(lambda: sc.umount(str(rootfs), sc.MNT_DETACH))
            user = cfglib.resolve_user(
                str(rootfs), image.config.get("User", ""),
                sec.run_as_user.value if sec.HasField("run_as_user") else None,
                sec.run_as_group.value if sec.HasField("run_as_group") else None,
                sec.run_as_username, list(sec.supplemental_groups),
                strict=sec.supplemental_groups_policy == pb.Strict)
            if image_vols:
                undo.push(lambda: image_mounts.unmount_all(d))
            for vol in image_vols:
                mount_sources[vol.index] = image_mounts.mount(d, vol)
            self.cgroups.create(cgroup)
            undo.push(lambda: self.cgroups.remove(cgroup))
            self.cgroups.apply(cgroup, res)
            if not sec.privileged:
                self.cgroups.restrict_devices(cgroup, spec.device_rules(devices))
            if log_path:
                os.makedirs(os.path.dirname(log_path), exist_ok=True)
            return user

        user = await asyncio.to_thread(prepare)
        self._warm_cgroup_attach()  # after the mkdirs: a pending attach holds cgroup_mutex
        launch_doc = spec.launch_doc(config, s, self._sdir(s.id), image, argv, caps, user, mount_sources,
                                     devices, apparmor)
        if image_vols:  # what ContainerStatus reports and RemoveImage keeps
            launch_doc["image_volumes"] = {str(v.index): {"id": v.image.id, "ref": v.ref} for v in image_vols}
        image_ref = image.repo_digests[0] if image.repo_digests else image.id
        c = ContainerRecord(id=cid, sandbox_id=s.id, key=key, created_at=now_ns(),
                            config=encode(config.SerializeToString()), image=config.image.image,
                            image_id=image.id, image_ref=image_ref, rootfs=str(rootfs), cgroup=cgroup,
                            log_path=log_path, launch=launch_doc, resources=dataclasses.asdict(res))
        await made
        await self._persist_off_loop(c)
        return c

    def _check_pid_target(self, target_id: str, sandbox_id: str) -> None:
        """TARGET pid mode (an ephemeral debug container): the target is a container of the same pod."""
        if not target_id:
            raise InvalidArgument("namespace_options.target_id is required with pid TARGET")
        target = self.containers.get(target_id)
        if target is None or target.sandbox_id != sandbox_id:
            raise NotFound(f"namespace_options.target_id: container {target_id!r} not found in sandbox "
                           f"{sandbox_id}")

    def _pid_ns_path(self, c: ContainerRecord, s: SandboxRecord) -> str:
        """The pid namespace a "join" container enters: the pod's (pause), or its target container's."""
        target_id = c.launch.get("pid_target")
        if not target_id:
            return f"/proc/{s.pid}/ns/pid"
        target = self.containers.get(target_id)
        require(target is not None and target.state == ContainerState.RUNNING and target.pid > 0,
                f"target container {target_id} of pid namespace is not running")
        assert target is not None
        return f"/proc/{target.pid}/ns/pid"

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
            argv=tuple(L["argv"]), env=tuple(L["env"]), cwd=L["cwd"], creds=spec.creds(c), rootfs=c.rootfs,
            mounts=spec.mounts(c), masked_paths=tuple(L["masked"]), readonly_paths=tuple(L["readonly_paths"]),
            readonly_rootfs=L["readonly_rootfs"], privileged=L["privileged"], join_ns=tuple(join),
            pid_mode=L["pid_mode"], pid_ns_path=self._pid_ns_path(c, s), shm_source=s.shm,
            devices=tuple((d["path"], d["mode"], d["major"], d["minor"]) for d in L.get("devices", [])),
            cgroup_procs=tuple(self.cgroups.procs_files(c.cgroup)),
            oom_score_adj=max(adj, own) if adj or own else None,
            shim=self.opts.shim, launcher=self.opts.launcher, exit_file=str(self._cdir(c.id) / "exit"),
            log_path=self.output_log(c), stdin_path=stdin_path, ctl_path=ctl_path, tty=cfg.tty,
            attach_path=stdio.attach_socket(self._cdir(c.id)))

    async def start_container(self, cid: str) -> None:
        c = self.container(cid)
        async with self._lock(c.id):
            require(c.state.can_start(), f"container {c.id} is {c.state.lower()}, not created")
            s = self.sandboxes.get(c.sandbox_id)
            if s is None or not s.state.can_start_container():
                raise FailedPrecondition(f"sandbox {c.sandbox_id} is not ready")
            self._warm_cgroup_attach()

            def start() -> tuple[Any, int, int]:
                """One worker-thread hop: pause's liveness and the spec (they read and make files), the
                launch, the start times."""
                if not alive(s.pid, s.pid_start):
                    raise FailedPrecondition(f"sandbox {c.sandbox_id} is not ready")
                launched = launch(self._launch_spec(c, s))
                return launched, proc_start(launched.pid), proc_start(launched.shim_pid)

            try:
                launched, pid_start, shim_start = await asyncio.to_thread(start)
            except LaunchError as e:
                c.state, c.exit_code, c.reason, c.message = ContainerState.EXITED, 128, "StartError", str(e)
                c.started_at = c.finished_at = now_ns()
                self._persist_container(c)
                self._exited[c.id].set()
                raise StartError(f"failed to start container {c.id}: {e}") from e
            c.pid, c.pid_start = launched.pid, pid_start
            c.shim_pid, c.shim_start = launched.shim_pid, shim_start
            c.state, c.started_at = ContainerState.RUNNING, now_ns()
            # Watched before the record is written: the record is numbered at once, so an exit seen
            # meanwhile is written after it; a cancelled verb still leaves the container watched.
            self._watch(c.shim_pid, lambda: self._on_container_exit(c))
            await self._persist_off_loop(c)
        self._emit(c, pb.CONTAINER_STARTED_EVENT)

    async def stop_container(self, cid: str, grace: int) -> None:
        try:
            c = self.container(cid)
        except NotFound:
            return  # idempotent
        async with self._lock(c.id):
            if not c.state.can_stop():
                return  # nothing runs: stopped already
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

    def _on_container_exit(self, c: ContainerRecord) -> None:
        if not c.state.can_exit() or self.containers.get(c.id) is not c:
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
            c.state = ContainerState.EXITED
        else:
            c.exit_code, c.finished_at = 255, now_ns()
            c.state, c.reason = ContainerState.EXITED, "Unknown"
            c.message = "the container's shim exited without recording a status"
        self._persist_container(c)
        self._exited.setdefault(c.id, asyncio.Event()).set()
        # Like containerd deleting the task on exit: free the rootfs mount and the cgroup now, so
        # RemoveContainer later only forgets the record and its files.
        self._background(c.id, self._release_kernel_objects, c)
        self._emit(c, pb.CONTAINER_STOPPED_EVENT)

    async def remove_container(self, cid: str) -> None:
        try:
            c = self.container(cid)
        except NotFound:
            return
        if not c.state.can_remove():
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
            self._files.pop(c.id, None)
        self._locks.pop(c.id, None)
        if trash is not None:  # the (unmounted) upper/work dirs are deleted off the request path
            self._background(f"trash-{c.id}", remove_tree, trash)
        self._emit(c, pb.CONTAINER_DELETED_EVENT)

    def _release_kernel_objects(self, c: ContainerRecord) -> None:
        """Kill leftovers, unmount the rootfs, remove the cgroup: idempotent, "gone" is success."""
        for pid in self.cgroups.pids(c.cgroup):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if os.path.ismount(c.rootfs):
            sc.umount(c.rootfs, sc.MNT_DETACH)
        image_mounts.unmount_all(self._cdir(c.id))
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
        st = pb.ContainerStatus(id=c.id, metadata=config.metadata, state=c.state.cri, created_at=c.created_at,
                                started_at=c.started_at, finished_at=c.finished_at, exit_code=c.exit_code,
                                image=pb.ImageSpec(image=c.image), image_ref=c.image_ref, image_id=c.image_id,
                                reason=c.reason, message=c.message, log_path=c.log_path)
        st.labels.update(config.labels)
        st.annotations.update(config.annotations)
        st.mounts.extend(config.mounts)
        for index, vol in (c.launch.get("image_volumes") or {}).items():
            st.mounts[int(index)].image.image = vol["ref"]  # the image by digest, as mounted
        r = c.resources
        lin = st.resources.linux
        lin.cpu_period, lin.cpu_quota = r.get("cpu_period", 0), r.get("cpu_quota", 0)
        lin.cpu_shares = r.get("cpu_shares", 0)
        lin.memory_limit_in_bytes = r.get("memory_limit", 0)
        lin.cpuset_cpus, lin.cpuset_mems = r.get("cpuset_cpus", ""), r.get("cpuset_mems", "")
        u = st.user.linux
        u.uid, u.gid = c.launch["uid"], c.launch["gid"]
        u.supplemental_groups.extend(c.launch["groups"])
        return st

    def list_containers(self, f: pb.ContainerFilter | None) -> list[ContainerRecord]:
        out = []
        sel = dict(f.label_selector) if f is not None else {}
        for c in self.containers.values():
            if f is not None:
                if f.id and not c.id.startswith(f.id):
                    continue
                if f.pod_sandbox_id and not c.sandbox_id.startswith(f.pod_sandbox_id):
                    continue
                if f.HasField("state") and c.state.cri != f.state.state:
                    continue
                if sel and not selected(self.container_labels(c), sel):
                    continue
            out.append(c)
        return out

    async def update_resources(self, cid: str, linux: pb.LinuxContainerResources) -> None:
        c = self.container(cid)
        spec.validate_resources(linux, "linux")
        async with self._lock(c.id):
            require(c.state.can_update(), f"container {c.id} is not running")
            res = spec.resources(linux)
            await asyncio.to_thread(self.cgroups.apply, c.cgroup, res)
            # Fields left unset (0, "") keep their values, as containerd merges an update into the spec.
            c.resources = {**c.resources, **{k: v for k, v in dataclasses.asdict(res).items() if v}}
            self._persist_container(c)

    async def reopen_log(self, cid: str) -> None:
        c = self.container(cid)
        require(c.state.can_reopen_log() and alive(c.shim_pid, c.shim_start),
                f"container {c.id} is not running")
        if not c.log_path:
            return
        os.kill(c.shim_pid, signal.SIGUSR1)
        for _ in range(100):
            if await asyncio.to_thread(os.path.exists, c.log_path):
                return
            await asyncio.sleep(0.01)
        raise FailedPrecondition(f"container {c.id}: the log was not reopened")


def _check_host_paths(mounts: list[tuple[int, pb.Mount]]) -> list[str]:
    """Each bind mount's host path resolved, in order (blocking: it stats every component)."""
    return [cfglib.check_mount_paths(m.container_path, m.host_path, i) for i, m in mounts]
