"""The hostpath driver's controller decisions and records, without mounts (no root needed)."""

from __future__ import annotations

import pytest

from csi.driver.errors import CSIError
from csi.driver.hostpath import Capability, Config, HostPath, check_capabilities, paginate, requested_capacity
from csi.driver.state import State

RWO = Capability("mount", "SINGLE_NODE_WRITER")


@pytest.fixture
def hp(tmp_path):
    return HostPath(Config(name="hostpath.csi.nodeagent.io", node_id="n1", root=str(tmp_path / "st")),
                    now=lambda: 1700000000.0)


def code(fn, *args, **kw) -> str:
    with pytest.raises(CSIError) as e:
        fn(*args, **kw)
    return e.value.code


def test_capabilities_the_driver_refuses_say_why():
    assert check_capabilities([RWO]) == ""
    assert "block" in check_capabilities([Capability("block", "SINGLE_NODE_WRITER")])
    assert "access type" in check_capabilities([Capability("", "SINGLE_NODE_WRITER")])
    assert "MULTI_NODE_MULTI_WRITER" in check_capabilities([Capability("mount", "MULTI_NODE_MULTI_WRITER")])
    assert "'discard'" in check_capabilities([Capability("mount", "SINGLE_NODE_WRITER", "", ("discard",))])
    assert check_capabilities([Capability("mount", "SINGLE_NODE_WRITER", "ext4", ("ro", "noexec"))]) == ""


def test_capacity_range_rules():
    assert requested_capacity(10, 0, 100) == 10
    assert requested_capacity(10, 20, 100) == 10
    with pytest.raises(CSIError) as e:
        requested_capacity(30, 20, 100)
    assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(CSIError) as e:
        requested_capacity(200, 0, 100)
    assert e.value.code == "OUT_OF_RANGE"
    with pytest.raises(CSIError) as e:
        requested_capacity(-1, 0, 100)
    assert e.value.code == "INVALID_ARGUMENT"


def test_pagination_tokens_survive_deletions():
    ids = ["a", "b", "c", "d", "e"]
    page, token = paginate(ids, "", 2)
    assert page == ["a", "b"] and token
    page, token = paginate(["a", "c", "d", "e"], token, 2)  # b was deleted meanwhile
    assert page == ["c", "d"]
    page, token = paginate(ids, token, 2)
    assert page == ["e"] and token == ""
    with pytest.raises(CSIError) as e:
        paginate(ids, "bogus", 0)
    assert e.value.code == "ABORTED"


def test_create_volume_is_idempotent_by_name_and_refuses_another_size(hp, tmp_path):
    v1 = hp.create_volume("pvc-1", [RWO], required=1 << 20)
    v2 = hp.create_volume("pvc-1", [RWO], required=1 << 20)
    assert v1.id == v2.id and (tmp_path / "st" / "volumes" / v1.id).is_dir()
    assert code(hp.create_volume, "pvc-1", [RWO], required=2 << 20, limit=2 << 20) == "ALREADY_EXISTS"
    assert code(hp.create_volume, "", [RWO]) == "INVALID_ARGUMENT"
    assert code(hp.create_volume, "x", []) == "INVALID_ARGUMENT"
    assert code(hp.create_volume, "x" * 129, [RWO]) == "INVALID_ARGUMENT"
    assert code(hp.create_volume, "t", [RWO], requisite=[{"topology.hostpath.csi/node": "n2"}]) == \
        "RESOURCE_EXHAUSTED"


def test_records_survive_a_restart(hp, tmp_path):
    v = hp.create_volume("pvc-2", [RWO], required=5)
    again = HostPath(hp.config, State(hp.config.root))
    assert again.state.volumes[v.id].name == "pvc-2" and again.state.volumes[v.id].capacity == 5


def test_a_configured_capacity_is_accounted(tmp_path):
    hp = HostPath(Config(name="d", node_id="n1", root=str(tmp_path / "st"), capacity=100))
    hp.create_volume("a", [RWO], required=60)
    assert hp.get_capacity(None) == (40, 100)
    assert code(hp.create_volume, "b", [RWO], required=50) == "RESOURCE_EXHAUSTED"
    kept = hp.state.volume_by_name("a")
    assert kept is not None
    assert [p.name for p in (tmp_path / "st" / "volumes").iterdir()] == [kept.id]
    assert hp.get_capacity({"topology.hostpath.csi/node": "elsewhere"}) == (0, 0)


def test_snapshot_restore_and_clone_copy_the_content(hp, tmp_path):
    src = hp.create_volume("src", [RWO], required=10)
    (tmp_path / "st" / "volumes" / src.id / "file").write_text("data\n")
    snap = hp.create_snapshot("snap", src.id)
    assert hp.create_snapshot("snap", src.id).id == snap.id
    other = hp.create_volume("other", [RWO])
    assert code(hp.create_snapshot, "snap", other.id) == "ALREADY_EXISTS"
    (tmp_path / "st" / "volumes" / src.id / "file").write_text("changed\n")
    restored = hp.create_volume("restored", [RWO], required=10, snapshot_id=snap.id)
    assert (tmp_path / "st" / "volumes" / restored.id / "file").read_text() == "data\n"
    clone = hp.create_volume("clone", [RWO], required=10, source_volume_id=src.id)
    assert (tmp_path / "st" / "volumes" / clone.id / "file").read_text() == "changed\n"
    assert code(hp.create_volume, "small", [RWO], required=5, snapshot_id=snap.id) == "OUT_OF_RANGE"
    assert code(hp.create_volume, "nosnap", [RWO], snapshot_id="missing") == "NOT_FOUND"
    assert not hp.state.volume_by_name("small") and not hp.state.volume_by_name("nosnap")
    hp.delete_snapshot(snap.id)
    hp.delete_snapshot(snap.id)  # already gone: success
    assert not (tmp_path / "st" / "snapshots" / f"{snap.id}.tar.gz").exists()


def test_delete_volume(hp, tmp_path):
    v = hp.create_volume("gone", [RWO])
    hp.delete_volume(v.id)
    hp.delete_volume(v.id)
    assert not (tmp_path / "st" / "volumes" / v.id).exists()
    assert code(hp.delete_volume, "") == "INVALID_ARGUMENT"
    v = hp.create_volume("staged", [RWO])
    v.staged.append("/somewhere")
    assert code(hp.delete_volume, v.id) == "FAILED_PRECONDITION"


def test_expansion_never_shrinks(hp):
    v = hp.create_volume("grow", [RWO], required=10)
    assert hp.expand_volume(v.id, 20, 0) == 20
    assert hp.expand_volume(v.id, 5, 0) == 20
    assert code(hp.expand_volume, "missing", 20, 0) == "NOT_FOUND"
