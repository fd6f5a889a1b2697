"""Pure logic of the runtime: command/env/user merging, capabilities, state files, CNI config handling."""

from __future__ import annotations

import json

import pytest

from cni.invoke import CNI, Attachment, NetworkConfigList, first_ip, load_conf_dir
from cri.runtime import caps, config
from cri.runtime.errors import InvalidArgument
from cri.runtime.state import ContainerRecord, load, proc_start, save
from kernel import caps as kcaps


@pytest.mark.parametrize("cmd,args,want", [
    ([], [], ["/bin/sh", "-c", "default"]),
    (["echo"], [], ["echo"]),
    ([], ["x"], ["/bin/sh", "-c", "x"]),
    (["echo"], ["a", "b"], ["echo", "a", "b"]),
])
def test_command_follows_kubernetes_rules(cmd, args, want):
    image = {"Entrypoint": ["/bin/sh", "-c"], "Cmd": ["default"]}
    assert config.command(image, cmd, args) == want


def test_command_required():
    with pytest.raises(InvalidArgument, match="command"):
        config.command({}, [], [])


def test_environment_merges_and_overrides():
    env = config.environment({"Env": ["A=1", "B=2"]}, [("B", "3"), ("C", "4")], "host")
    assert env[:2] == ["A=1", "B=3"] and "C=4" in env and "HOSTNAME=host" in env
    assert any(e.startswith("PATH=") for e in env)
    with pytest.raises(InvalidArgument):
        config.environment({}, [("", "x")], "")


def test_resolve_user_from_image_files(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home:/bin/sh\n")
    (tmp_path / "etc/group").write_text("root:x:0:\nuser:x:1000:\nextra:x:2000:user\nwww:x:33:\n")
    assert config.resolve_user(str(tmp_path), "user", None, None, "", []) == (1000, 1000, [2000])
    assert config.resolve_user(str(tmp_path), "1000:www", None, None, "", [5]) == (1000, 33, [2000, 5])
    assert config.resolve_user(str(tmp_path), "", 7, 8, "", []) == (7, 8, [])
    assert config.resolve_user(str(tmp_path), "", None, None, "user", []) == (1000, 1000, [2000])
    with pytest.raises(InvalidArgument, match="ghost"):
        config.resolve_user(str(tmp_path), "ghost", None, None, "", [])


def test_capabilities_add_drop_all():
    got = caps.resolve(["NET_ADMIN"], ["CAP_KILL"], False, 40)
    assert "NET_ADMIN" in got and "KILL" not in got and "CHOWN" in got
    assert caps.resolve(["CHOWN"], ["ALL"], False, 40) == ["CHOWN"]
    # privileged: every capability the runtime itself holds (root here may lack some, e.g. SYS_RESOURCE)
    held = [c for c in kcaps.CAPS if kcaps.NUMBER[c] <= 40 and kcaps.own_bounding() >> kcaps.NUMBER[c] & 1]
    assert caps.resolve([], [], True, 40) == held
    with pytest.raises(InvalidArgument, match="FLY"):
        caps.resolve(["FLY"], [], False, 40)
    assert kcaps.mask(["CHOWN", "KILL"]) == (1 << 0) | (1 << 5)


def test_state_round_trip_is_atomic(tmp_path):
    rec = ContainerRecord(id="c1", sandbox_id="s1", key="k", created_at=1, config="", image="i",
                          image_id="sha256:x",
                          image_ref="r", rootfs="/r", cgroup="/g", log_path="", launch={"argv": ["a"]})
    save(tmp_path / "c.json", rec)
    assert load(tmp_path / "c.json", ContainerRecord) == rec
    assert not list(tmp_path.glob(".*.tmp"))
    (tmp_path / "bad.json").write_text("{not json")
    assert load(tmp_path / "bad.json", ContainerRecord) is None
    assert proc_start(1) > 0 or proc_start(1) == 0  # readable or hidden, never raises
    assert proc_start(-1) == 0


def test_conflist_loading_and_plugin_stdin(tmp_path):
    (tmp_path / "20-b.conflist").write_text(json.dumps({"cniVersion": "1.0.0", "name": "b",
                                                         "plugins": [{"type": "bridge"}]}))
    (tmp_path / "10-a.conf").write_text(json.dumps({"cniVersion": "0.4.0", "name": "a", "type": "ptp"}))
    (tmp_path / "05-broken.conflist").write_text("{")
    net = load_conf_dir(tmp_path)
    assert net and net.name == "a" and net.plugins[0]["type"] == "ptp"
    assert load_conf_dir(tmp_path / "missing") is None
    cni = CNI(tmp_path, [], tmp_path / "cache")
    plugin = {"type": "portmap", "capabilities": {"portMappings": True}}
    nl = NetworkConfigList("n", "1.0.0", (plugin,), b"{}")
    att = Attachment("id", "/ns", capability_args={"portMappings": [{"hostPort": 80}], "bandwidth": {}})
    doc = json.loads(cni._stdin(nl, plugin, att, {"ips": []}))
    assert doc["name"] == "n" and doc["cniVersion"] == "1.0.0" and doc["prevResult"] == {"ips": []}
    assert doc["runtimeConfig"] == {"portMappings": [{"hostPort": 80}]}
    with pytest.raises(Exception, match="type"):
        NetworkConfigList.parse(json.dumps({"name": "x", "plugins": [{}]}).encode())


def test_first_ip():
    assert first_ip({"ips": [{"address": "10.0.0.5/24"}, {"address": "fd00::5/64"}]}) == (
        "10.0.0.5", ["fd00::5"])
    assert first_ip(None) == ("", [])


def _name(cni: CNI) -> str:
    net = cni.network()
    assert net is not None
    return net.name


def test_network_is_read_again_when_a_config_file_changes(tmp_path):
    cni = CNI(tmp_path, [], tmp_path / "cache")
    assert cni.network() is None
    b = tmp_path / "20-b.conflist"
    b.write_text(json.dumps({"cniVersion": "1.0.0", "name": "b", "plugins": [{"type": "bridge"}]}))
    assert _name(cni) == "b"
    assert cni.network() is cni.network()  # unchanged files: parsed once
    with open(b, "w") as f:  # rewritten in place, longer (the size differs even within one mtime tick)
        f.write(json.dumps({"cniVersion": "1.0.0", "name": "b-rewritten", "plugins": [{"type": "bridge"}]}))
    assert _name(cni) == "b-rewritten"
    broken = tmp_path / "10-a.conflist"
    broken.write_text("{")  # first by name but unloadable: the next one still serves
    assert _name(cni) == "b-rewritten"
    broken.write_text(json.dumps({"cniVersion": "1.0.0", "name": "a", "plugins": [{"type": "ptp"}]}))
    assert _name(cni) == "a"  # fixed in place: now it is first
    broken.unlink()
    b.unlink()
    assert cni.network() is None
