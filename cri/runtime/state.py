"""Runtime state on disk: one JSON record per sandbox and container, in a file of two slots (RecordFile).

Records are plain dataclasses; the CRI config they were made from is kept as serialized protobuf
(base64) so List/Status can answer with the caller's exact labels, annotations and metadata. A record's
state is an enum that owns the guards of what may happen to its object in that state (youki's
ContainerStatus::can_start and friends); each verb refreshes, asks the guard, acts, then persists.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import enum
import hashlib
import json
import os
import struct
import threading
import zlib
from pathlib import Path
from typing import Any, TypeVar

from cri.proto import api_pb2 as pb
from kernel.fs import atomic_write

R = TypeVar("R", "SandboxRecord", "ContainerRecord")


class SandboxState(enum.StrEnum):
    """A pod sandbox's state, persisted by its value."""

    READY = "READY"  # pause runs, holding the pod's namespaces
    NOTREADY = "NOTREADY"  # stopped, or its pause exited

    @classmethod
    def _missing_(cls, value: object) -> SandboxState:
        return cls.NOTREADY  # a value this runtime does not know was never ready

    @property
    def cri(self) -> pb.PodSandboxState:
        return pb.SANDBOX_READY if self is SandboxState.READY else pb.SANDBOX_NOTREADY

    def can_create_container(self) -> bool:
        return self is SandboxState.READY

    def can_start_container(self) -> bool:
        """(with its pause still alive: the container joins the namespaces pause holds)"""
        return self is SandboxState.READY

    def can_port_forward(self) -> bool:
        return self is SandboxState.READY

    def can_exit(self) -> bool:
        """Whether pause's exit changes anything: a ready sandbox becomes NOTREADY."""
        return self is SandboxState.READY


class ContainerState(enum.StrEnum):
    """A container's state, persisted by its value: CREATED → RUNNING → EXITED, or CREATED → EXITED when
    its process could not start. Nothing sets UNKNOWN today; a record carrying it (or a value this runtime
    does not know) counts as exited."""

    CREATED = "CREATED"
    RUNNING = "RUNNING"
    EXITED = "EXITED"
    UNKNOWN = "UNKNOWN"

    @classmethod
    def _missing_(cls, value: object) -> ContainerState:
        return cls.UNKNOWN

    @property
    def cri(self) -> pb.ContainerState:
        return _CONTAINER_CRI[self]

    def can_start(self) -> bool:
        return self is ContainerState.CREATED

    def can_stop(self) -> bool:
        """Whether StopContainer has a process to signal (else it is done: stopping is idempotent)."""
        return self is ContainerState.RUNNING

    def can_exit(self) -> bool:
        """Whether a shim's exit is recorded: only a running container exits."""
        return self is ContainerState.RUNNING

    def can_remove(self) -> bool:
        """Whether RemoveContainer may go ahead at once (a running container is stopped first)."""
        return self is not ContainerState.RUNNING

    def can_exec(self) -> bool:
        return self is ContainerState.RUNNING

    def can_attach(self) -> bool:
        return self is ContainerState.RUNNING

    def can_reopen_log(self) -> bool:
        return self is ContainerState.RUNNING

    def can_update(self) -> bool:
        """UpdateContainerResources: the cgroup exists from create until the exit frees it."""
        return self in (ContainerState.CREATED, ContainerState.RUNNING)

    def has_exited(self) -> bool:
        """No process will run in it any more (waiters on its exit are released)."""
        return self in (ContainerState.EXITED, ContainerState.UNKNOWN)

    def has_stats(self) -> bool:
        """Whether it is in the stats lists (a running process in a live cgroup)."""
        return self is ContainerState.RUNNING


_CONTAINER_CRI = {ContainerState.CREATED: pb.CONTAINER_CREATED, ContainerState.RUNNING: pb.CONTAINER_RUNNING,
                  ContainerState.EXITED: pb.CONTAINER_EXITED, ContainerState.UNKNOWN: pb.CONTAINER_UNKNOWN}


@dataclasses.dataclass
class SandboxRecord:
    id: str
    key: str  # name_namespace_uid_attempt: unique among live sandboxes
    created_at: int
    config: str  # base64 PodSandboxConfig
    runtime_handler: str = ""
    state: SandboxState = SandboxState.READY
    pid: int = 0
    pid_start: int = 0
    net_mode: pb.NamespaceMode = pb.POD  # POD or NODE
    ipc_mode: pb.NamespaceMode = pb.POD
    pid_mode: pb.NamespaceMode = pb.CONTAINER  # unless the pod shares its pid namespace
    hostname: str = ""
    pod_cgroup: str = ""
    cgroup: str = ""  # pause's own leaf
    made_cgroups: list[str] = dataclasses.field(default_factory=list)
    shm: str = ""  # tmpfs mount bound on each container's /dev/shm
    network: bool = False  # attached through CNI (and not yet released)
    ip: str = ""
    additional_ips: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.state = SandboxState(self.state)  # loaded records carry its value


@dataclasses.dataclass
class ContainerRecord:
    id: str
    sandbox_id: str
    key: str
    created_at: int
    config: str  # base64 ContainerConfig
    image: str  # as the caller named it
    image_id: str
    image_ref: str  # digested reference when known, else the id
    rootfs: str
    cgroup: str
    log_path: str
    launch: dict[str, Any]  # argv, env, cwd, creds, mounts, ... (see runtime.containers)
    state: ContainerState = ContainerState.CREATED
    started_at: int = 0
    finished_at: int = 0
    exit_code: int = 0
    reason: str = ""
    message: str = ""
    pid: int = 0
    pid_start: int = 0
    shim_pid: int = 0
    shim_start: int = 0
    resources: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        self.state = ContainerState(self.state)  # loaded records carry its value


def encode(data: bytes) -> str:
    return base64.b64encode(data).decode()


def decode(text: str) -> bytes:
    return base64.b64decode(text)


def dump(rec: SandboxRecord | ContainerRecord) -> bytes:
    """A record's fields as JSON. Its values are JSON already (str, int, bool, lists, dicts), so no
    dataclasses.asdict: its deep copy cost more than the write (0.5 of 2 ms per container write)."""
    return json.dumps({f.name: getattr(rec, f.name) for f in dataclasses.fields(rec)}).encode()


def save(path: Path, rec: SandboxRecord | ContainerRecord) -> None:
    """A record as a plain JSON file, replaced atomically and durably (kernel.fs); `load` reads it too."""
    atomic_write(path, dump(rec))


# A record file is two slots of one size, each `NAR2`, a sequence number, the payload's length and crc32,
# then the payload (the record's JSON). A transition overwrites the slot not holding the current record,
# in place, and fdatasyncs: the file's blocks were allocated and written when it was made, so nothing but
# data reaches the disk and no journal commit is waited for (0.1 ms, where a new file renamed over the old
# one costs two commits: 0.5 ms on an idle disk, several ms while other writers fill the journal). A crash
# mid-write leaves that slot failing its check, and the other one, the last record acknowledged, is read.
# The file itself is made (and remade when a record outgrows its slots) through kernel.fs's atomic_write.
_SLOT_HEAD = struct.Struct("<4sQII")
_SLOT_MAGIC = b"NAR2"
_PAGE = 4096


class RecordFile:
    """One record's file: `write(data)` makes it durable before it returns, and skips a record equal to
    the last one written. Writes may come from worker threads (the verbs keep their fdatasync off the
    event loop): each is numbered by `stage()` on the caller's side, and one older than the last written
    is dropped, so the file always ends with the newest record staged."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.slot = 0  # the slots' size; 0: the next write makes the file
        self.seq = 0  # the sequence number of the slot holding the current record
        self._last = b""  # that record's digest
        self._mutex = threading.Lock()
        self._staged = 0  # the number of the last record staged
        self._written = 0  # the number of the last record written

    def stage(self) -> int:
        """The next record's number: take it where the record's state is read (the event loop)."""
        self._staged += 1
        return self._staged

    def write(self, data: bytes, number: int | None = None) -> None:
        with self._mutex:
            if number is not None:
                if number <= self._written:
                    return  # a newer record is on disk already
                self._written = number
            self._write(data)

    def _write(self, data: bytes) -> None:
        digest = _digest(data)
        if digest == self._last:
            return
        if _SLOT_HEAD.size + len(data) > self.slot:
            self._make(data)
        else:
            seq = self.seq + 1
            self.slot, broken = 0, self.slot  # until the slot is durable: the next write remakes the file
            fd = os.open(self.path, os.O_WRONLY | os.O_CLOEXEC)
            try:
                _pwrite_all(fd, _slot(seq, data), (seq % 2) * broken)
                os.fdatasync(fd)
            finally:
                os.close(fd)
            self.slot, self.seq = broken, seq
        self._last = digest

    def make(self, data: bytes, room: int = 0) -> None:
        """(Re)make the file holding `data`, with slots for records up to `room` bytes (default: twice
        its size)."""
        with self._mutex:
            self._make(data, room)

    def _make(self, data: bytes, room: int = 0) -> None:
        need = _SLOT_HEAD.size + max(room, 2 * len(data))
        slot = -(-need // _PAGE) * _PAGE
        seq = self.seq + 1
        blob = bytearray(2 * slot)
        first = _slot(seq, data)
        blob[(seq % 2) * slot:(seq % 2) * slot + len(first)] = first
        atomic_write(self.path, bytes(blob))
        self.slot, self.seq, self._last = slot, seq, _digest(data)


def read_record(path: Path) -> bytes | None:
    """The current record in a record file (or a plain JSON file, as `save` and older runtimes wrote)."""
    raw = path.read_bytes()
    if raw[:1] == b"{":
        return raw
    half, best, best_seq = len(raw) // 2, None, -1
    for off in (0, half):
        if half < _SLOT_HEAD.size:
            break
        magic, seq, n, crc = _SLOT_HEAD.unpack_from(raw, off)
        payload = raw[off + _SLOT_HEAD.size:off + _SLOT_HEAD.size + n]
        fits = n <= half - _SLOT_HEAD.size
        if magic == _SLOT_MAGIC and fits and zlib.crc32(payload) == crc and seq > best_seq:
            best, best_seq = payload, seq
    return best


def load(path: Path, cls: type[R]) -> R | None:
    with contextlib.suppress(OSError, ValueError, TypeError):
        data = read_record(path)
        if data is None:
            return None
        doc = json.loads(data)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})
    return None


def _slot(seq: int, data: bytes) -> bytes:
    return _SLOT_HEAD.pack(_SLOT_MAGIC, seq, len(data), zlib.crc32(data)) + data


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def proc_start(pid: int) -> int:
    """A process's start time (clock ticks since boot): with the pid, it names one process for good."""
    if pid <= 0:
        return 0
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return 0
    rest = data.rsplit(b")", 1)[-1].split()
    if len(rest) < 20 or rest[0] == b"Z":
        return 0
    return int(rest[19])


def alive(pid: int, start: int) -> bool:
    return pid > 0 and start > 0 and proc_start(pid) == start
