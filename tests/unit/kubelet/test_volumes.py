import base64
import os
import socket
import stat
from pathlib import Path

import pytest

from nodeagent.kubelet.volumes import AtomicWriter, FileProjection, PayloadError, VolumeError, VolumeManager
from nodeagent.kubelet.volumes.manager import check_host_path, empty_dir_memory_size
from nodeagent.kubelet.volumes.payloads import (
    VolumeSourceError,
    configmap_payload,
    field_ref_value,
    format_map,
    go_quote,
    resource_field_value,
)
from tests.unit.kubelet.podspecs import container, pod


def b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


# -- AtomicWriter -----------------------------------------------------------------------------------


def listing(d: Path) -> dict:
    return {p.name: (os.readlink(p) if p.is_symlink() else "dir" if p.is_dir() else "file")
            for p in d.iterdir()}


def test_atomic_writer_layout(tmp_path: Path):
    w = AtomicWriter(tmp_path / "v", now=lambda: 1_700_000_000)
    assert w.write({"a": FileProjection(b"1"), "sub/b": FileProjection(b"2", 0o600)})
    d = tmp_path / "v"
    entries = listing(d)
    ts = os.readlink(d / "..data")
    assert ts.startswith("..2023_11_14_22_13_20.")
    assert entries == {"..data": ts, ts: "dir", "a": "..data/a", "sub": "..data/sub"}
    assert (d / "a").read_bytes() == b"1" and (d / "sub/b").read_bytes() == b"2"
    assert stat.S_IMODE((d / ts / "sub/b").stat().st_mode) == 0o600
    assert stat.S_IMODE((d / ts / "a").stat().st_mode) == 0o644


def test_atomic_writer_update_removes_old(tmp_path: Path):
    d = tmp_path / "v"
    w = AtomicWriter(d)
    w.write({"a": FileProjection(b"1"), "b": FileProjection(b"2")})
    old_ts = os.readlink(d / "..data")
    assert not w.write({"a": FileProjection(b"1"), "b": FileProjection(b"2")})  # unchanged: no new dir
    assert os.readlink(d / "..data") == old_ts
    assert w.write({"a": FileProjection(b"3"), "c": FileProjection(b"4")})
    new_ts = os.readlink(d / "..data")
    assert new_ts != old_ts
    # the replaced generation stays (readers that resolved ..data just before the swap), "b" is gone
    assert set(listing(d)) == {"..data", new_ts, old_ts, "a", "c"}
    assert (d / "a").read_bytes() == b"3"
    assert w.write({"a": FileProjection(b"3", 0o400), "c": FileProjection(b"4")})  # a mode change is a change
    third = os.readlink(d / "..data")
    assert set(listing(d)) == {"..data", third, new_ts, "a", "c"}  # two generations at most
    assert w.write({})
    assert set(listing(d)) == {"..data", os.readlink(d / "..data"), third}


@pytest.mark.parametrize("bad", ["/abs", "../up", "a/../../b", "..hidden", ""])
def test_atomic_writer_rejects_bad_paths(tmp_path: Path, bad):
    with pytest.raises(PayloadError):
        AtomicWriter(tmp_path).write({bad: FileProjection(b"x")})


# -- payloads ---------------------------------------------------------------------------------------


def test_configmap_payload_items_modes_optional():
    cm = {"data": {"a": "1", "b": "2"}, "binaryData": {"bin": b64("\x00\x01")}}
    assert configmap_payload({"name": "c"}, cm) == {"a": FileProjection(b"1"), "b": FileProjection(b"2"),
                                                    "bin": FileProjection(b"\x00\x01")}
    items = [{"key": "a", "path": "x/y"}, {"key": "b", "path": "z", "mode": 0o400}]
    p = configmap_payload({"name": "c", "defaultMode": 0o440, "items": items}, cm)
    assert p == {"x/y": FileProjection(b"1", 0o440), "z": FileProjection(b"2", 0o400)}
    with pytest.raises(VolumeSourceError, match="configmap references non-existent config key: nope"):
        configmap_payload({"name": "c", "items": [{"key": "nope", "path": "n"}]}, cm)
    optional = {"name": "c", "optional": True, "items": [{"key": "nope", "path": "n"}]}
    assert configmap_payload(optional, cm) == {}
    with pytest.raises(VolumeSourceError, match='configmap "c" not found'):
        configmap_payload({"name": "c"}, None)
    assert configmap_payload({"name": "c", "optional": True}, None) == {}


def test_format_map_and_quote():
    assert format_map({"b": "2", "a": 'x"y'}) == 'a="x\\"y"\nb="2"'
    assert go_quote("line\nnext\x1b") == '"line\\nnext\\x1b"'
    assert go_quote("héllo") == '"héllo"'


def test_field_refs():
    p = pod(container())
    p["metadata"].update(labels={"app": "web", "tier": "fe"}, annotations={"k": "v"})
    assert field_ref_value(p, "metadata.name") == "p"
    assert field_ref_value(p, "metadata.namespace") == "default"
    assert field_ref_value(p, "metadata.uid") == "1234-abcd"
    assert field_ref_value(p, "metadata.labels") == 'app="web"\ntier="fe"'
    assert field_ref_value(p, "metadata.labels['tier']") == "fe"
    assert field_ref_value(p, "metadata.annotations") == 'k="v"'
    with pytest.raises(VolumeSourceError):
        field_ref_value(p, "spec.containers")


def test_resource_field_refs():
    c = container("app", requests={"cpu": "250m", "memory": "64Mi"}, limits={"cpu": "1500m"})
    p = pod(c)
    assert resource_field_value(p, {"containerName": "app", "resource": "limits.cpu"}) == "2"
    for resource, divisor, want in (("limits.cpu", "1m", "1500"), ("requests.memory", "1Mi", "64"),
                                    ("requests.cpu", "1m", "250")):
        ref = {"containerName": "app", "resource": resource, "divisor": divisor}
        assert resource_field_value(p, ref) == want, ref
    # no memory limit: node allocatable
    assert resource_field_value(p, {"containerName": "app", "resource": "limits.memory"},
                                {"memory": "2Gi"}) == str(2 * 2**30)


# -- hostPath ------------------------------------------------------------------------------------------


def test_host_path_types(tmp_path: Path):
    d = tmp_path / "newdir/deeper"
    check_host_path(str(d), "DirectoryOrCreate")
    assert d.is_dir()
    f = tmp_path / "newfile"
    check_host_path(str(f), "FileOrCreate")
    assert f.is_file() and stat.S_IMODE(f.stat().st_mode) & 0o644
    check_host_path(str(f), "File")
    check_host_path(str(d), "Directory")
    check_host_path(str(tmp_path / "whatever"), None)
    with pytest.raises(VolumeSourceError, match="is not a directory"):
        check_host_path(str(f), "Directory")
    with pytest.raises(VolumeSourceError, match="is not a directory"):
        check_host_path(str(f), "DirectoryOrCreate")
    with pytest.raises(VolumeSourceError, match="is not a file"):
        check_host_path(str(d), "FileOrCreate")
    with pytest.raises(VolumeSourceError, match="is not a directory"):
        check_host_path(str(tmp_path / "missing"), "Directory")
    with pytest.raises(VolumeSourceError, match="is not a socket file"):
        check_host_path(str(f), "Socket")
    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(sock_path))
        check_host_path(str(sock_path), "Socket")
    check_host_path("/dev/null", "CharDevice")
    with pytest.raises(VolumeSourceError, match="is not a block device"):
        check_host_path("/dev/null", "BlockDevice")
    with pytest.raises(VolumeSourceError, match="is an invalid volume type"):
        check_host_path("/dev/null", "Weird")


# -- the manager ---------------------------------------------------------------------------------------


def full_pod():
    p = pod(container("app", limits={"memory": "256Mi"}), uid="uid-1", name="web")
    p["metadata"]["labels"] = {"app": "web"}
    p["spec"]["volumes"] = [
        {"name": "scratch", "emptyDir": {}},
        {"name": "cfg", "configMap": {"name": "settings", "items": [{"key": "conf", "path": "app.conf"}]}},
        {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        {"name": "info", "downwardAPI": {"items": [{"path": "labels",
                                                    "fieldRef": {"fieldPath": "metadata.labels"}},
                                                   {"path": "mem", "resourceFieldRef": {
                                                       "containerName": "app", "resource": "limits.memory",
                                                       "divisor": "1Mi"}}]}},
        {"name": "all", "projected": {"sources": [
            {"configMap": {"name": "settings"}},
            {"secret": {"name": "creds", "items": [{"key": "user", "path": "secret/user"}]}},
            {"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
            {"serviceAccountToken": {"path": "token", "audience": "api"}}]}},
    ]
    return p


def store():
    objs = {("default", "settings"): {"data": {"conf": "v=1", "other": "o"}},
            ("default", "creds"): {"data": {"user": b64("admin"), "pass": b64("s3cret")}}}
    return objs


def test_setup_update_teardown(tmp_path: Path):
    objs = store()
    vm = VolumeManager(tmp_path, secrets_in_memory=False, get_configmap=lambda ns, n: objs.get((ns, n)),
                       get_secret=lambda ns, n: objs.get((ns, n)),
                       get_token=lambda p, aud, exp: f"token-for-{aud}-{exp}")
    p = full_pod()
    vols = vm.setup_pod(p)
    base = tmp_path / "pods/uid-1/volumes"
    assert vols["scratch"].host_path == str(base / "kubernetes.io~empty-dir/scratch")
    assert stat.S_IMODE(os.stat(vols["scratch"].host_path).st_mode) == 0o777
    cfg = Path(vols["cfg"].host_path)
    assert cfg == base / "kubernetes.io~configmap/cfg" and vols["cfg"].read_only
    assert (cfg / "app.conf").read_text() == "v=1" and not (cfg / "other").exists()
    creds = Path(vols["creds"].host_path)
    assert creds == base / "kubernetes.io~secret/creds"
    assert (creds / "pass").read_text() == "s3cret"
    assert stat.S_IMODE((creds / "pass").stat().st_mode) == 0o400
    info = Path(vols["info"].host_path)
    assert info == base / "kubernetes.io~downward-api/info"
    assert (info / "labels").read_text() == 'app="web"' and (info / "mem").read_text() == "256"
    allp = Path(vols["all"].host_path)
    assert allp == base / "kubernetes.io~projected/all"
    assert sorted(os.listdir(allp)) == sorted(["..data", os.readlink(allp / "..data"), "conf",
                                               "name", "other",
                                               "secret", "token"])
    assert (allp / "secret/user").read_text() == "admin"
    assert (allp / "token").read_text() == "token-for-api-3600"
    # update: only what changed is rewritten
    assert vm.update_pod(p) == []
    objs[("default", "settings")] = {"data": {"conf": "v=2", "other": "o"}}
    assert vm.update_pod(p) == ["cfg", "all"]
    assert (cfg / "app.conf").read_text() == "v=2"
    p["metadata"]["labels"]["tier"] = "fe"
    assert vm.update_pod(p) == ["info"]
    assert vm.pod_uids_on_disk() == ["uid-1"]
    vm.teardown_pod("uid-1")
    assert not (tmp_path / "pods/uid-1").exists()
    vm.teardown_pod("uid-1")  # idempotent
    assert vm.pod_uids_on_disk() == []


def test_missing_configmap_is_a_failed_mount(tmp_path: Path):
    vm = VolumeManager(tmp_path, get_configmap=lambda ns, n: None)
    p = pod(container(), uid="u2")
    p["spec"]["volumes"] = [{"name": "cfg", "configMap": {"name": "missing"}}]
    with pytest.raises(VolumeError) as ei:
        vm.setup_pod(p)
    assert ei.value.event_message == (
        'MountVolume.SetUp failed for volume "cfg" : configmap "missing" not found')
    p["spec"]["volumes"][0]["configMap"]["optional"] = True
    vols = vm.setup_pod(p)
    assert sorted(os.listdir(vols["cfg"].host_path)) == sorted(
        ["..data", os.readlink(Path(vols["cfg"].host_path) / "..data")])


def test_unsupported_volume_types(tmp_path: Path):
    vm = VolumeManager(tmp_path, secrets_in_memory=False)
    p = pod(container(), uid="u3")
    p["spec"]["volumes"] = [{"name": "n", "nfs": {"server": "x", "path": "/"}}]
    with pytest.raises(VolumeError, match="nfs is unimplemented"):
        vm.setup_pod(p)
    p["spec"]["volumes"] = [{"name": "h", "emptyDir": {"medium": "HugePages"}}]
    with pytest.raises(VolumeError, match="HugePages is unimplemented"):
        vm.setup_pod(p)
    p["spec"]["volumes"] = [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}]
    with pytest.raises(VolumeError, match="no token issuer"):
        vm.setup_pod(p)


def test_host_path_volume_is_not_under_pod_dir(tmp_path: Path):
    vm = VolumeManager(tmp_path / "root")
    p = pod(container(), uid="u4")
    p["spec"]["volumes"] = [{"name": "h",
                             "hostPath": {"path": str(tmp_path / "data"), "type": "DirectoryOrCreate"}}]
    vols = vm.setup_pod(p)
    assert vols["h"].host_path == str(tmp_path / "data") and (tmp_path / "data").is_dir()
    (tmp_path / "data/keep").write_text("x")
    vm.teardown_pod("u4")
    assert (tmp_path / "data/keep").exists()  # teardown never touches host paths
    with pytest.raises(ValueError):
        vm.pod_dir("../etc")


def test_empty_dir_memory_size():
    p = pod(container(limits={"memory": "512Mi"}))
    assert empty_dir_memory_size(p, {}, 4 * 2**30) == 512 * 2**20
    assert empty_dir_memory_size(p, {"sizeLimit": "64Mi"}, 4 * 2**30) == 64 * 2**20
    assert empty_dir_memory_size(p, {"sizeLimit": "1Gi"}, 4 * 2**30) == 512 * 2**20
    be = pod(container())
    assert empty_dir_memory_size(be, {}, 4 * 2**30) == 4 * 2**30
    assert empty_dir_memory_size(be, {"sizeLimit": "1Mi"}, None) == 2**20
    assert empty_dir_memory_size(be, {}, None) is None
