"""What every verb module of the runtime shares: its options, its tables of sandboxes and containers with
their locks and reserved names, lookups, persistence, the exit watcher, and background cleanup.

`cri.runtime.service.Runtime` assembles this core with one module per verb group (sandboxes,
containers, exec, stats, events, recovery), as containerd's CRI service spreads one struct over a
file per verb. The hooks at the end name what one verb group asks of another.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from cri.proto import api_pb2 as pb
from cri.runtime.errors import FailedPrecondition, InvalidArgument, NotFound
from cri.runtime.state import ContainerRecord, RecordFile, SandboxRecord, decode, dump
from kernel.cgroups import Cgroups
from kernel.mounts import mounts_under, unmount
from kernel.threads import finish

if TYPE_CHECKING:
    from cni.invoke import CNI
    from cri.images.store import ImageStore

log = logging.getLogger("nodeagent.cri.runtime")

PACKAGE_DIR = Path(__file__).resolve().parent.parent
# The runtime handlers this runtime serves (CRI RunPodSandbox runtime_handler, advertised in Status):
# "" is the default; "runc" and "nodeagent" name the same runtime, for RuntimeClasses written for either.
HANDLERS = ("", "runc", "nodeagent")
POD, CONTAINER, NODE, TARGET = pb.POD, pb.CONTAINER, pb.NODE, pb.TARGET  # CRI NamespaceMode

R = TypeVar("R", SandboxRecord, ContainerRecord)
T = TypeVar("T")


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


def selected(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    """A CRI label selector: every key it names, with that value."""
    return all(labels.get(k) == v for k, v in selector.items())


def require(ok: bool, message: str) -> None:
    """A state guard's verdict: FailedPrecondition(message) unless ok."""
    if not ok:
        raise FailedPrecondition(message)


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


async def make_or_undo(make: Awaitable[T], undo: Undo) -> T:
    """A create verb's steps (`make`, registering their undo steps in `undo`); when they fail or the caller
    is cancelled, everything they made is undone — only once they stopped: a cancelled caller (a client
    past its deadline, the daemon stopping) waits for the step under way to end, so a mount made by a
    worker thread after the cancel is still unmounted, not left behind."""
    task = asyncio.ensure_future(make)
    try:
        return await asyncio.shield(task)
    except BaseException:
        await finish(task)
        await finish(asyncio.ensure_future(undo.run()))
        raise


class RuntimeCore:
    def __init__(self, opts: RuntimeOptions, cgroups: Cgroups, images: ImageStore | None = None,
                 cni: CNI | None = None) -> None:
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
        self._files: dict[str, RecordFile] = {}  # id -> its record's file (see _persist)
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
        self._persist(s)

    def _persist_container(self, c: ContainerRecord) -> None:
        self._persist(c)

    def _record_file(self, rec: SandboxRecord | ContainerRecord) -> RecordFile:
        f = self._files.get(rec.id)
        if f is None:
            path = self._sdir(rec.id) / "sandbox.json" if isinstance(rec, SandboxRecord) else \
                self._cdir(rec.id) / "container.json"
            f = self._files[rec.id] = RecordFile(path)
        return f

    def _persist(self, rec: SandboxRecord | ContainerRecord) -> None:
        """Record a transition before the verb answers, durably (state.RecordFile: the first write makes
        the file, each later one is one in-place slot write and fdatasync); a record equal to the last one
        written is not written again (StopPodSandbox after pause's exit recorded NOTREADY; the stop
        RemovePodSandbox repeats)."""
        f = self._record_file(rec)
        f.write(dump(rec), f.stage())

    async def _persist_off_loop(self, rec: SandboxRecord | ContainerRecord) -> None:
        """`_persist`, its fdatasync on a worker thread: the record is taken now, the verb answers once it
        is durable, and a later record of the same object (an exit seen meanwhile) is never overwritten
        by this one (RecordFile.stage)."""
        f = self._record_file(rec)
        await asyncio.to_thread(f.write, dump(rec), f.stage())

    def _make_record_file(self, ident: str, path: Path, room: int, undo: Undo) -> asyncio.Future[None]:
        """Make a new object's record file (slots for records up to `room` bytes) on a worker thread while
        the verb does its kernel work, so that its first record too is one in-place slot write; await it
        before persisting. The file holds no record until then: recovery removes it as half-made."""
        f = self._files[ident] = RecordFile(path)
        undo.push(lambda: self._files.pop(ident, None))
        made = asyncio.get_running_loop().run_in_executor(None, f.make, b"", room)

        async def settle() -> None:  # undone before the object's directory is removed
            await asyncio.gather(made, return_exceptions=True)

        undo.push(settle)
        return made

    # -- lookups ---------------------------------------------------------------------------------
    @staticmethod
    def _find(table: dict[str, R], ident: str, what: str) -> R:
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

    @staticmethod
    def sandbox_labels(s: SandboxRecord) -> Mapping[str, str]:
        """The sandbox's labels as a dict, read-only (made once per record): a label-filtered List looks
        at every record, and the kubelet lists each pod's by its uid label at every sync."""
        return _sandbox_labels(s.config)

    @staticmethod
    def container_labels(c: ContainerRecord) -> Mapping[str, str]:
        """The container's labels as a dict, read-only (as sandbox_labels)."""
        return _container_labels(c.config)

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

    # -- what one verb group asks of another (defined in its module) ------------------------------
    def sandbox_status(self, s: SandboxRecord) -> pb.PodSandboxStatus:  # sandboxes.py
        raise NotImplementedError

    def _on_pause_exit(self, s: SandboxRecord) -> None:  # sandboxes.py
        raise NotImplementedError

    def container_status(self, c: ContainerRecord) -> pb.ContainerStatus:  # containers.py
        raise NotImplementedError

    async def stop_container(self, cid: str, grace: int) -> None:  # containers.py
        raise NotImplementedError

    async def remove_container(self, cid: str) -> None:  # containers.py
        raise NotImplementedError

    def _on_container_exit(self, c: ContainerRecord) -> None:  # containers.py
        raise NotImplementedError

    def _emit(self, c: ContainerRecord, kind: pb.ContainerEventType) -> None:  # events.py
        raise NotImplementedError

    def events(self) -> AsyncIterator[pb.ContainerEventResponse]:  # events.py
        raise NotImplementedError


# -- helpers (blocking; called through asyncio.to_thread where they touch the kernel) ---------------


@functools.lru_cache(maxsize=1024)
def _parsed_sandbox_config(text: str) -> pb.PodSandboxConfig:
    return pb.PodSandboxConfig.FromString(decode(text))


@functools.lru_cache(maxsize=2048)
def _parsed_container_config(text: str) -> pb.ContainerConfig:
    return pb.ContainerConfig.FromString(decode(text))


@functools.lru_cache(maxsize=1024)
def _sandbox_labels(text: str) -> dict[str, str]:
    return dict(_parsed_sandbox_config(text).labels)


@functools.lru_cache(maxsize=2048)
def _container_labels(text: str) -> dict[str, str]:
    return dict(_parsed_container_config(text).labels)


def remove_tree(d: Path) -> None:
    if d.exists():
        shutil.rmtree(d, ignore_errors=True)


def remove_unmounted(d: Path) -> None:
    """Remove a sandbox's directory after unmounting whatever is still mounted below it (its /dev/shm when
    a stop could not, or a create undone): rmtree does not cross into a mount, so it would leave the
    mount, and the directory holding it, behind."""
    if not d.exists():
        return
    for point in mounts_under(d):
        unmount(point)
    remove_tree(d)
