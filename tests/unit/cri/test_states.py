"""The runtime's state enums: each guard against every state, their CRI values, and records on disk."""

from __future__ import annotations

import json
import os

import pytest

from cri.proto import api_pb2 as pb
from cri.runtime import state
from cri.runtime.core import RuntimeCore, RuntimeOptions, require
from cri.runtime.errors import FailedPrecondition
from cri.runtime.state import ContainerRecord, ContainerState, SandboxRecord, SandboxState, load, save

C, R, E, U = ContainerState.CREATED, ContainerState.RUNNING, ContainerState.EXITED, ContainerState.UNKNOWN

# guard → the states in which it says yes (every other state: no)
CONTAINER_GUARDS = {
    "can_start": {C},
    "can_stop": {R},
    "can_exit": {R},
    "can_remove": {C, E, U},
    "can_exec": {R},
    "can_attach": {R},
    "can_reopen_log": {R},
    "can_update": {C, R},
    "has_exited": {E, U},
    "has_stats": {R},
}

SANDBOX_GUARDS = {
    "can_create_container": {SandboxState.READY},
    "can_start_container": {SandboxState.READY},
    "can_port_forward": {SandboxState.READY},
    "can_exit": {SandboxState.READY},
}


@pytest.mark.parametrize("guard,yes", sorted(CONTAINER_GUARDS.items()))
@pytest.mark.parametrize("state", list(ContainerState))
def test_container_guards(guard, yes, state):
    assert getattr(state, guard)() is (state in yes)


@pytest.mark.parametrize("guard,yes", sorted(SANDBOX_GUARDS.items()))
@pytest.mark.parametrize("state", list(SandboxState))
def test_sandbox_guards(guard, yes, state):
    assert getattr(state, guard)() is (state in yes)


def test_every_guard_is_in_the_tables():
    for enum_cls, table in ((ContainerState, CONTAINER_GUARDS), (SandboxState, SANDBOX_GUARDS)):
        guards = {n for n in vars(enum_cls) if n.startswith(("can_", "has_"))}
        assert guards == set(table), f"{enum_cls.__name__}: a guard without a row, or a row without a guard"


@pytest.mark.parametrize("state,want", [(C, pb.CONTAINER_CREATED), (R, pb.CONTAINER_RUNNING),
                                        (E, pb.CONTAINER_EXITED), (U, pb.CONTAINER_UNKNOWN)])
def test_container_state_as_cri(state, want):
    assert state.cri == want


@pytest.mark.parametrize("state,want", [(SandboxState.READY, pb.SANDBOX_READY),
                                        (SandboxState.NOTREADY, pb.SANDBOX_NOTREADY)])
def test_sandbox_state_as_cri(state, want):
    assert state.cri == want


def test_a_lifecycle_passes_only_its_own_guards():
    """CREATED → RUNNING → EXITED: start once, stop and exit only while running, remove once not running."""
    s = C
    assert s.can_start() and not s.can_stop() and s.can_remove()
    s = R
    assert not s.can_start() and s.can_stop() and s.can_exit() and not s.can_remove()
    s = E
    assert not (s.can_start() or s.can_stop() or s.can_exit()) and s.can_remove() and s.has_exited()


def test_the_guard_verdict_is_failed_precondition():
    require(R.can_exec(), "unused")
    with pytest.raises(FailedPrecondition, match="container c1 is not running"):
        require(E.can_exec(), "container c1 is not running")


def test_states_are_stored_by_value_and_loaded_as_enums(tmp_path):
    """The on-disk records keep the strings older runtimes wrote, so a restart across versions re-adopts."""
    c = ContainerRecord(id="c1", sandbox_id="s1", key="k", created_at=1, config="", image="i",
                        image_id="sha256:x",
                        image_ref="sha256:x", rootfs="/r", cgroup="/cg", log_path="", launch={}, state=R)
    save(tmp_path / "c.json", c)
    assert json.loads((tmp_path / "c.json").read_text())["state"] == "RUNNING"
    back = load(tmp_path / "c.json", ContainerRecord)
    assert back is not None and back.state is R
    s = SandboxRecord(id="s1", key="k", created_at=1, config="")
    assert s.state is SandboxState.READY
    doc = {"id": "s1", "key": "k", "created_at": 1, "config": "", "state": "NOTREADY"}
    (tmp_path / "s.json").write_text(json.dumps(doc))
    loaded = load(tmp_path / "s.json", SandboxRecord)
    assert loaded is not None and loaded.state is SandboxState.NOTREADY


def test_a_state_this_runtime_does_not_know_reads_as_not_ready_or_unknown(tmp_path):
    """Such a record is still recovered (never removed as half-made): its pause or shim may still run."""
    doc = {"id": "s1", "key": "k", "created_at": 1, "config": "", "state": "PAUSED"}
    (tmp_path / "s.json").write_text(json.dumps(doc))
    s = load(tmp_path / "s.json", SandboxRecord)
    assert s is not None and s.state is SandboxState.NOTREADY
    assert ContainerState("PAUSED") is U and U.has_exited()


def test_a_transition_is_one_slot_write_and_a_repeat_none(tmp_path, monkeypatch):
    """The first write makes the record's file (kernel.fs); each later transition overwrites the older of
    its two slots in place and fdatasyncs (no new file, no rename); a record equal to the last is skipped
    (StopPodSandbox after pause's exit was recorded, and the stop RemovePodSandbox repeats)."""
    syncs: list[int] = []
    real = os.fdatasync

    def counted(fd: int) -> None:
        syncs.append(fd)
        real(fd)

    monkeypatch.setattr(state.os, "fdatasync", counted)
    rt = RuntimeCore(RuntimeOptions(state_dir=tmp_path), cgroups=None)  # type: ignore[arg-type]  # unused
    s = SandboxRecord(id="s1", key="k", created_at=1, config="")
    path = tmp_path / "sandboxes" / "s1" / "sandbox.json"
    path.parent.mkdir()
    rt._persist_sandbox(s)
    made = path.stat()
    rt._persist_sandbox(s)
    assert syncs == []
    s.state, s.network = SandboxState.NOTREADY, False
    rt._persist_sandbox(s)
    rt._persist_sandbox(s)
    assert len(syncs) == 1
    assert (path.stat().st_ino, path.stat().st_size) == (made.st_ino, made.st_size)
    back = load(path, SandboxRecord)
    assert back is not None and back.state is SandboxState.NOTREADY


def test_a_torn_slot_reads_as_the_record_before_it(tmp_path):
    path = tmp_path / "c.json"
    f = state.RecordFile(path)
    for n in range(3):
        f.write(json.dumps({"id": "s1", "key": "k", "created_at": n, "config": ""}).encode())
    raw = bytearray(path.read_bytes())
    newest = (f.seq % 2) * f.slot + 40  # a byte of the newest record's payload
    raw[newest] ^= 0xFF
    path.write_bytes(bytes(raw))
    back = load(path, SandboxRecord)
    assert back is not None and back.created_at == 1


def test_a_record_that_outgrows_its_slots_remakes_the_file(tmp_path):
    path = tmp_path / "c.json"
    f = state.RecordFile(path)
    f.write(json.dumps({"id": "s1", "key": "k", "created_at": 1, "config": ""}).encode())
    small = path.stat()
    f.write(json.dumps({"id": "s1", "key": "k", "created_at": 2, "config": "x" * 10_000}).encode())
    assert path.stat().st_ino != small.st_ino and path.stat().st_size > small.st_size
    back = load(path, SandboxRecord)
    assert back is not None and back.created_at == 2 and len(back.config) == 10_000
    assert not [p for p in tmp_path.iterdir() if p.name != "c.json"]  # no temporary file left


def test_a_file_made_ahead_holds_no_record_until_the_first_write(tmp_path):
    """RunPodSandbox and CreateContainer make the file beside their kernel work: until their record is
    written, recovery finds none there and removes the directory as half-made."""
    path = tmp_path / "c.json"
    f = state.RecordFile(path)
    f.make(b"", room=10_000)
    made = path.stat()
    assert load(path, SandboxRecord) is None
    f.write(json.dumps({"id": "s1", "key": "k", "created_at": 1, "config": ""}).encode())
    back = load(path, SandboxRecord)
    assert back is not None and back.created_at == 1
    assert (path.stat().st_ino, path.stat().st_size) == (made.st_ino, made.st_size)


def test_an_older_staged_record_never_overwrites_a_newer_one(tmp_path):
    """A verb writes its record on a worker thread; an exit seen meanwhile is staged after it and written
    first: the verb's late write is dropped, so the file ends with the exit."""
    path = tmp_path / "c.json"
    f = state.RecordFile(path)
    running, exited = f.stage(), f.stage()
    f.write(json.dumps({"id": "s1", "key": "k", "created_at": 2, "config": ""}).encode(), exited)
    f.write(json.dumps({"id": "s1", "key": "k", "created_at": 1, "config": ""}).encode(), running)
    back = load(path, SandboxRecord)
    assert back is not None and back.created_at == 2
    f.write(json.dumps({"id": "s1", "key": "k", "created_at": 3, "config": ""}).encode(), f.stage())
    back = load(path, SandboxRecord)
    assert back is not None and back.created_at == 3
