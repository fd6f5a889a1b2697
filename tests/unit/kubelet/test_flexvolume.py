"""FlexVolume's driver contract without mounts: status parsing, discovery when dropped in, the calls and
their arguments (a real executable that records its argv), fallbacks for `Not supported`, secrets."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from nodeagent.kubelet.volumes import VolumeError, VolumeManager
from nodeagent.kubelet.volumes.flexvolume import (
    DriverError,
    DriverProber,
    FlexVolumePlugin,
    NotSupported,
    options_for_driver,
    parse_status,
)
from nodeagent.kubelet.volumes.payloads import VolumeSourceError
from nodeagent.kubelet.volumes.plugins import PluginVolume
from tests.unit.kubelet.podspecs import container, pod


def test_status_success_with_capabilities_and_defaults():
    st = parse_status("init", b'{"status": "Success", "capabilities": {"attach": false}}')
    assert st.capabilities.attach is False
    assert st.capabilities.fs_group is True  # a capability left out keeps kubelet's default
    st = parse_status("init", b'{"status": "Success"}')
    assert st.capabilities.attach is True  # kubelet assumes attach unless init says otherwise
    assert parse_status("attach", b'{"status": "Success", "device": "/dev/loop3"}').device == "/dev/loop3"


def test_status_failure_not_supported_and_garbage():
    with pytest.raises(DriverError) as ei:
        parse_status("mount", b'{"status": "Failure", "message": "no such export"}')
    assert str(ei.value) == "mount command failed, status: Failure, reason: no such export"
    with pytest.raises(NotSupported):
        parse_status("attach", b'{"status": "Not supported"}')
    with pytest.raises(DriverError) as ei:
        parse_status("mount", b"mount: permission denied")
    assert "not a JSON status" in str(ei.value) and "permission denied" in str(ei.value)


def test_options_carry_fstype_readwrite_name_and_the_sources_options():
    src = {"driver": "v/d", "fsType": "ext4", "options": {"size": "1Gi", "kubernetes.io/readwrite": "x"}}
    opts = options_for_driver(src, "vol", True, {"kubernetes.io/pod.name": "p"})
    assert opts["kubernetes.io/fsType"] == "ext4"
    assert opts["kubernetes.io/pvOrVolumeName"] == "vol"
    assert opts["kubernetes.io/pod.name"] == "p"
    assert opts["size"] == "1Gi"
    assert opts["kubernetes.io/readwrite"] == "x"  # the source's own options come last, as kubelet's
    assert options_for_driver({}, "v", False)["kubernetes.io/readwrite"] == "rw"


DRIVER = """#!/bin/sh
echo "$*" >> {log}
case "$1" in
init) echo '{init}' ;;
mount) mkdir -p "$2/made-by-driver"; echo '{{"status": "Success"}}' ;;
unmount) rm -rf "$2/made-by-driver"; echo '{{"status": "Success"}}' ;;
*) echo '{{"status": "Not supported"}}' ;;
esac
"""


def install(plugin_dir: Path, name: str, log: Path, init: str = '{"status": "Success", '
            '"capabilities": {"attach": false}}') -> Path:
    vendor_dir = plugin_dir / name.replace("/", "~")
    vendor_dir.mkdir(parents=True, exist_ok=True)
    exe = vendor_dir / name.split("/")[-1]
    tmp = exe.with_suffix(".tmp")
    tmp.write_text(DRIVER.format(log=log, init=init))
    tmp.chmod(0o755)
    os.replace(tmp, exe)  # as a person drops a driver in: whole, at once
    return exe


def calls(log: Path) -> list[list[str]]:
    return [line.split(" ", 2) for line in log.read_text().splitlines()] if log.exists() else []


def test_drivers_are_found_when_dropped_in_and_reinitialised_when_replaced(tmp_path):
    plugins, log = tmp_path / "exec", tmp_path / "log"
    prober = DriverProber(plugins)
    assert prober.probe() == {}  # no dir yet: no drivers, no error
    install(plugins, "acme/fast", log)
    found = prober.probe()
    assert list(found) == ["acme/fast"] and found["acme/fast"].capabilities.attach is False
    assert calls(log) == [["init"]]
    prober.probe()
    assert calls(log) == [["init"]]  # unchanged: init is not called again
    install(plugins, "acme/fast", log, init='{"status": "Success"}')
    assert prober.probe()["acme/fast"].capabilities.attach is True
    assert len(calls(log)) == 2


def test_a_driver_whose_init_fails_is_not_a_plugin(tmp_path):
    plugins, log = tmp_path / "exec", tmp_path / "log"
    install(plugins, "acme/broken", log, init='{"status": "Failure", "message": "no lvm"}')
    (plugins / ".hidden").mkdir()
    (plugins / "acme~noexe").mkdir()
    prober = DriverProber(plugins)
    assert prober.probe() == {}
    with pytest.raises(VolumeSourceError) as ei:
        prober.driver("acme/broken", "data")
    assert 'failed to get Plugin from volumeSpec for volume "data" err=no volume plugin matched' in \
        str(ei.value)


def flex_pod(uid: str, source: dict, fs_group: int | None = None) -> dict:
    p = pod(container("c"), uid=uid, name="web")
    p["metadata"]["namespace"] = "team"
    p["spec"]["serviceAccountName"] = "builder"
    p["spec"]["volumes"] = [{"name": "data", "flexVolume": source}]
    if fs_group is not None:
        p["spec"]["securityContext"] = {"fsGroup": fs_group}
    return p


def test_mount_is_called_with_the_dir_and_kubelets_options_and_unmount_on_teardown(tmp_path):
    plugins, log = tmp_path / "exec", tmp_path / "log"
    install(plugins, "acme/fast", log)
    flex = FlexVolumePlugin(DriverProber(plugins), tmp_path / "kubelet", "node1")
    vm = VolumeManager(tmp_path / "kubelet", plugins={"flexVolume": flex})
    vols = vm.setup_pod(flex_pod("u1", {"driver": "acme/fast", "fsType": "xfs", "options": {"k": "v"}}))
    target = tmp_path / "kubelet/pods/u1/volumes/acme~fast/data"
    assert vols["data"].host_path == str(target) and (target / "made-by-driver").is_dir()
    init, mount = calls(log)
    assert init == ["init"]
    assert mount[:2] == ["mount", str(target)]
    opts = json.loads(mount[2])
    assert opts == {"kubernetes.io/fsType": "xfs", "kubernetes.io/readwrite": "rw",
                    "kubernetes.io/pvOrVolumeName": "data", "kubernetes.io/pod.name": "web",
                    "kubernetes.io/pod.namespace": "team", "kubernetes.io/pod.uid": "u1",
                    "kubernetes.io/serviceAccount.name": "builder", "k": "v"}
    vm.teardown_pod("u1")
    assert calls(log)[-1] == ["unmount", str(target)]
    assert not (tmp_path / "kubelet/pods/u1").exists()


def test_a_failed_mount_is_a_failed_mount_event_and_leaves_no_dir(tmp_path):
    plugins, log = tmp_path / "exec", tmp_path / "log"
    exe = install(plugins, "acme/fail", log)
    failing = 'echo \'{"status": "Failure", "message": "export gone"}\'; exit 1'
    exe.write_text(exe.read_text().replace('mkdir -p "$2/made-by-driver"; echo \'{"status": "Success"}\'',
                                           failing))
    flex = FlexVolumePlugin(DriverProber(plugins), tmp_path / "kubelet")
    vm = VolumeManager(tmp_path / "kubelet", plugins={"flexVolume": flex})
    with pytest.raises(VolumeError) as ei:
        vm.setup_pod(flex_pod("u2", {"driver": "acme/fail"}))
    assert ei.value.event_message == ('MountVolume.SetUp failed for volume "data" : mount command failed, '
                                      "status: Failure, reason: export gone")
    assert not (tmp_path / "kubelet/pods/u2/volumes/acme~fail/data").exists()


def test_a_pod_naming_a_driver_that_is_not_there_waits_with_the_reason(tmp_path):
    flex = FlexVolumePlugin(DriverProber(tmp_path / "exec"), tmp_path / "kubelet")
    vm = VolumeManager(tmp_path / "kubelet", plugins={"flexVolume": flex})
    with pytest.raises(VolumeError) as ei:
        vm.setup_pod(flex_pod("u3", {"driver": "acme/none"}))
    assert "no volume plugin matched" in ei.value.event_message
    # without a plugin dir at all, the volume type is refused by name
    with pytest.raises(VolumeError) as ei:
        VolumeManager(tmp_path / "k2").setup_pod(flex_pod("u3", {"driver": "acme/none"}))
    assert "flexVolume is unimplemented" in ei.value.event_message


def test_secret_ref_must_be_of_the_drivers_type_and_is_passed_base64(tmp_path):
    plugins, log = tmp_path / "exec", tmp_path / "log"
    install(plugins, "acme/fast", log)
    secrets = {("team", "creds"): {"type": "acme/fast", "data": {"user": base64.b64encode(b"ann").decode()}},
               ("team", "opaque"): {"type": "Opaque", "data": {}}}
    flex = FlexVolumePlugin(DriverProber(plugins), tmp_path / "kubelet",
                            get_secret=lambda ns, name: secrets.get((ns, name)))
    vm = VolumeManager(tmp_path / "kubelet", plugins={"flexVolume": flex})
    vm.setup_pod(flex_pod("u4", {"driver": "acme/fast", "secretRef": {"name": "creds"}}))
    opts = json.loads(calls(log)[-1][2])
    assert base64.b64decode(opts["kubernetes.io/secret/user"]) == b"ann"
    with pytest.raises(VolumeError) as ei:
        vm.setup_pod(flex_pod("u5", {"driver": "acme/fast", "secretRef": {"name": "opaque"}}))
    assert "couldn't get secret team/opaque err: Cannot get secret of type acme/fast" in \
        ei.value.event_message
    with pytest.raises(VolumeError) as ei:
        vm.setup_pod(flex_pod("u6", {"driver": "acme/fast", "secretRef": {"name": "missing"}}))
    assert 'secrets "missing" not found' in ei.value.event_message


def test_unsupported_commands_are_not_asked_again(tmp_path):
    plugins, log = tmp_path / "exec", tmp_path / "log"
    install(plugins, "acme/fast", log)
    driver = DriverProber(plugins).driver("acme/fast", "v")
    for _ in range(2):
        with pytest.raises(NotSupported):
            driver.call("expandvolume", "{}")
    assert [c[0] for c in calls(log)] == ["init", "expandvolume"]


def test_fs_group_is_passed_and_applied_unless_read_only(tmp_path):
    plugins, log = tmp_path / "exec", tmp_path / "log"
    install(plugins, "acme/fast", log)
    flex = FlexVolumePlugin(DriverProber(plugins), tmp_path / "kubelet")
    gid = os.getgid()
    p = flex_pod("u7", {"driver": "acme/fast"}, fs_group=gid)
    target = tmp_path / "kubelet/pods/u7/volumes/acme~fast/data"
    flex.setup(p, PluginVolume("flexVolume", {"driver": "acme/fast"}, "data", False, "team"), target)
    assert json.loads(calls(log)[-1][2])["kubernetes.io/mounterArgs.FsGroup"] == str(gid)
    assert os.stat(target).st_mode & 0o2000  # setgid on the volume's dirs, as SetVolumeOwnership


def test_a_failed_attach_is_a_failed_attach_volume_event(tmp_path):
    plugins, log = tmp_path / "exec", tmp_path / "log"
    exe = install(plugins, "acme/disk", log, init='{"status": "Success"}')  # attach: true
    exe.write_text(exe.read_text().replace(
        "*) echo", 'attach) echo \'{"status": "Failure", "message": "disk busy"}\'; exit 1 ;;\n*) echo'))
    vm = VolumeManager(tmp_path / "kubelet",
                       plugins={"flexVolume": FlexVolumePlugin(DriverProber(plugins), tmp_path / "kubelet")})
    with pytest.raises(VolumeError) as ei:
        vm.setup_pod(flex_pod("u8", {"driver": "acme/disk"}))
    assert ei.value.reason == "FailedAttachVolume"
    assert ei.value.event_message == ('AttachVolume.Attach failed for volume "data" : attach command failed, '
                                      "status: Failure, reason: disk busy")
    assert not (tmp_path / "kubelet/pods/u8/volumes/acme~disk/data").exists()
