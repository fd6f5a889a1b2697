"""The kubelet's volume manager on `nodeagent up` with the real kernel and kubectl (issue 22 items 5, 6):
FlexVolume drivers dropped into --volume-plugin-dir (the example bind driver; an attaching driver's call
sequence), fsGroup ownership seen from the container, subPath/subPathExpr binds and an escaping symlink
refused, a Block PV on a loop device written and read through volumeDevices, volume stats beside `df`, and
a restart of `up` with mounted volumes that keeps them and cleans them after the pods go."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.kubelet.test_node_up import BUSYBOX, Cluster, _running, _wait_runtime_empty
from tests.e2e.storage.test_local_path_up import apply, claim, get, wait_for
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

EXAMPLE_DRIVER = Path(__file__).resolve().parents[3] / "examples" / "flexvolume" / "bind"

# An attaching driver: records its calls; "attaches" a directory named by the source's `disk` option
# (its device path is that dir), mounts it at the device mount dir with a bind, leaves `mount` and
# `unmount` to the kubelet (Not supported), as drivers for real disks often do.
ATTACHING_DRIVER = """#!/bin/sh
echo "$*" >> {log}
case "$1" in
init) echo '{{"status": "Success", "capabilities": {{"attach": true}}}}' ;;
attach) d=$(printf '%s' "$2" | jq -r .disk); echo "{{\\"status\\": \\"Success\\", \\"device\\": \\"$d\\"}}" ;;
waitforattach) echo "{{\\"status\\": \\"Success\\", \\"device\\": \\"$2\\"}}" ;;
mountdevice) mount --bind "$3" "$2" && echo '{{"status": "Success"}}' ;;
unmountdevice) umount "$2" && echo '{{"status": "Success"}}' ;;
detach) echo '{{"status": "Success"}}' ;;
*) echo '{{"status": "Not supported"}}' ;;
esac
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, images):
    d = tmp_path_factory.mktemp("up-volmgr")
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(d / "images"), "import",
                    "--no-progress", str(images.busybox.docker_archive)], check=True, capture_output=True)
    c = Cluster(d, unique("nd"), unique("kb"))
    c.extra = ["--volume-plugin-dir", str(d / "flex")]
    try:
        c.start()
        yield c
    finally:
        if c.proc is not None and c.proc.poll() is None:
            c.kubectl("delete", "pods", "--all", "--wait=true", "--timeout=90s", check=False)
            c.kubectl("delete", "pvc", "--all", "--wait=true", "--timeout=60s", check=False)
            c.kubectl("delete", "pv", "--all", "--wait=true", "--timeout=60s", check=False)
            _wait_runtime_empty(c)
            rc = c.stop()
            assert rc == 0, c.tail()
    assert str(d) not in Path("/proc/mounts").read_text(), "a mount under the data dir outlived `up`"


def pod(name: str, script: str, volumes: list[dict], mounts: list[dict], **spec) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, "restartPolicy": "Never", **spec,
                     "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", script], "volumeMounts": mounts}],
                     "volumes": volumes}}


def mounts_of(uid: str) -> list[str]:
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if f"/pods/{uid}/" in line.split()[4]]


def succeeded(c: Cluster, name: str, timeout: float = 90) -> dict:
    return c.wait_pod(name, lambda p: (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"),
                      timeout=timeout)


def delete(c: Cluster, name: str) -> None:
    c.kubectl("delete", "pod", name, "--wait=true", "--timeout=60s")


def install_driver(c: Cluster, vendor_driver: str, text: str | None = None) -> Path:
    """Drop a driver in as a person does (the kubelet is already running: found by its probe)."""
    d = c.data_dir / "flex" / vendor_driver.replace("/", "~")
    d.mkdir(parents=True, exist_ok=True)
    exe = d / vendor_driver.split("/")[-1]
    tmp = d / ".new"
    if text is None:
        shutil.copy(EXAMPLE_DRIVER, tmp)
    else:
        tmp.write_text(text)
    tmp.chmod(0o755)
    os.replace(tmp, exe)
    return exe


def test_example_flexvolume_driver_dropped_in_and_used_by_a_pod(cluster, tmp_path):
    c = cluster
    shared = tmp_path / "shared"
    install_driver(c, "nodeagent/bind")
    apply(c, pod("flex-user", "echo from-the-pod > /data/f; cat /data/seed; sleep 3600",
                 [{"name": "data", "flexVolume": {"driver": "nodeagent/bind",
                                                  "options": {"source": str(shared)}}}],
                 [{"name": "data", "mountPath": "/data"}], nodeName=c.node,
                 initContainers=[{"name": "seed", "image": BUSYBOX, "imagePullPolicy": "Never",
                                  "command": ["sh", "-c", "echo seeded > /data/seed"],
                                  "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]))
    p = c.wait_pod("flex-user", _running, timeout=90)
    uid = p["metadata"]["uid"]
    target = c.data_dir / "kubelet" / "pods" / uid / "volumes" / "nodeagent~bind" / "data"
    assert str(target) in mounts_of(uid)
    wait_for(c, "the pod's file in the driver's source dir", lambda: (shared / "f").exists())
    assert (shared / "f").read_text() == "from-the-pod\n"
    assert c.kubectl("logs", "flex-user") == "seeded\n"
    delete(c, "flex-user")
    assert mounts_of(uid) == [] and not target.exists()
    assert (shared / "f").exists()  # unmount, not delete: the data is the driver's


def test_flexvolume_missing_driver_is_a_failed_mount_event(cluster):
    c = cluster
    apply(c, pod("flex-missing", "true", [{"name": "v", "flexVolume": {"driver": "acme/none"}}],
                 [{"name": "v", "mountPath": "/v"}], nodeName=c.node))
    ev = wait_for(c, "a FailedMount event", lambda: [e for e in c.events("flex-missing")
                                                     if e["reason"] == "FailedMount"])
    assert 'MountVolume.SetUp failed for volume "v"' in ev[0]["message"]
    assert "no volume plugin matched" in ev[0]["message"]
    assert c.pod("flex-missing")["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == \
        "ContainerCreating"
    delete(c, "flex-missing")


def test_attaching_flexvolume_driver_is_called_in_kubelets_order(cluster, tmp_path):
    c = cluster
    disk, log = tmp_path / "disk", tmp_path / "calls"
    disk.mkdir()
    install_driver(c, "acme/disk", ATTACHING_DRIVER.format(log=log))
    apply(c, pod("flex-attach", "echo on-disk > /d/f", [{"name": "d", "flexVolume": {
        "driver": "acme/disk", "fsType": "ext4", "options": {"disk": str(disk)}}}],
        [{"name": "d", "mountPath": "/d"}], nodeName=c.node))
    done = succeeded(c, "flex-attach")
    assert done["status"]["phase"] == "Succeeded", done["status"]
    assert (disk / "f").read_text() == "on-disk\n"
    uid = done["metadata"]["uid"]
    dmp = c.data_dir / "kubelet" / "plugins" / "kubernetes.io/flexvolume" / "acme" / "disk" / "mounts" / "d"
    target = c.data_dir / "kubelet" / "pods" / uid / "volumes" / "acme~disk" / "d"
    # a finished pod's volumes are unmounted and detached while its object stays (as the kubelet does)
    wait_for(c, "the volume detached", lambda: "detach" in log.read_text())
    assert c.pod("flex-attach")["status"]["phase"] == "Succeeded"
    delete(c, "flex-attach")
    calls = [line.split(" ", 1) for line in log.read_text().splitlines()]
    names = [x[0] for x in calls]
    assert names == ["init", "attach", "waitforattach", "mountdevice", "mount", "unmount", "unmountdevice",
                     "detach"], calls
    opts = json.loads(calls[1][1].rsplit(" ", 1)[0])
    assert opts["kubernetes.io/fsType"] == "ext4" and opts["disk"] == str(disk)
    assert calls[1][1].rsplit(" ", 1)[1] == c.node  # attach <options> <node>
    assert calls[2][1].startswith(f"{disk} ")  # waitforattach <device> <options>
    assert calls[3][1].startswith(f"{dmp} {disk} ")  # mountdevice <dir> <device> <options>
    assert calls[4][1].startswith(f"{target} ")  # mount <dir> <options>: Not supported → the kubelet binds
    assert calls[6][1] == str(dmp) and calls[7][1] == f"d {c.node}"
    assert str(dmp) not in Path("/proc/mounts").read_text() and not dmp.exists()


def test_fs_group_owns_the_volume_seen_from_the_container(cluster):
    c = cluster
    apply(c, pod("fsgroup", "id -G; stat -c '%g %A' /data; touch /data/new; stat -c '%g' /data/new",
                 [{"name": "data", "emptyDir": {}}], [{"name": "data", "mountPath": "/data"}],
                 nodeName=c.node, securityContext={"runAsUser": 1000, "fsGroup": 2345,
                                                   "fsGroupChangePolicy": "OnRootMismatch"}))
    done = succeeded(c, "fsgroup")
    assert done["status"]["phase"] == "Succeeded", c.kubectl("logs", "fsgroup", check=False)
    groups, mode, new = c.kubectl("logs", "fsgroup").splitlines()
    assert "2345" in groups.split()
    assert mode.split()[0] == "2345" and mode.split()[1][6] == "s"  # group-owned, setgid (drwxrwsrwx)
    assert new == "2345"  # what the pod makes inherits the group
    delete(c, "fsgroup")


def test_sub_path_and_sub_path_expr_and_an_escaping_symlink_refused(cluster):
    c = cluster
    vols = [{"name": "work", "emptyDir": {}}]
    ok = pod("subpaths", "echo a > /a/f; echo b > /b/f; touch /a/done; sleep 3600",
             vols, [{"name": "work", "mountPath": "/a", "subPath": "one/two"},
                    {"name": "work", "mountPath": "/b", "subPathExpr": "$(POD)/x"}], nodeName=c.node)
    ok["spec"]["containers"][0]["env"] = [{"name": "POD", "valueFrom": {"fieldRef": {
        "fieldPath": "metadata.name"}}}]
    apply(c, ok)
    done = c.wait_pod("subpaths", _running, timeout=90)
    vol = c.data_dir / "kubelet" / "pods" / done["metadata"]["uid"] / "volumes" / "kubernetes.io~empty-dir" \
        / "work"
    wait_for(c, "the container's files", lambda: (vol / "one/two/done").exists())
    assert (vol / "one/two/f").read_text() == "a\n" and (vol / "subpaths/x/f").read_text() == "b\n"
    delete(c, "subpaths")

    # an init container plants a symlink to the host's /etc; the next container's subPath through it
    plant = {"name": "plant", "image": BUSYBOX, "imagePullPolicy": "Never",
             "command": ["ln", "-s", "/etc", "/w/link"],
             "volumeMounts": [{"name": "work", "mountPath": "/w"}]}
    evil = pod("escape", "cat /x/hostname", vols, [{"name": "work", "mountPath": "/x", "subPath": "link"}],
               nodeName=c.node, initContainers=[plant])
    apply(c, evil)
    st = c.wait_pod("escape", lambda p: any(
        ((s.get("state") or {}).get("waiting") or {}).get("reason") == "CreateContainerConfigError"
        for s in (p.get("status") or {}).get("containerStatuses") or []), timeout=90)
    waiting = st["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["message"] == 'failed to prepare subPath for volumeMount "work" of container "c"'
    assert not [m for m in mounts_of(st["metadata"]["uid"]) if "volume-subpaths" in m]  # nothing half-made
    delete(c, "escape")


def _loop_device(backing: Path, size: int) -> str:
    with open(backing, "wb") as f:
        f.truncate(size)
    return subprocess.run(["losetup", "--find", "--show", str(backing)], check=True, capture_output=True,
                          text=True).stdout.strip()


def _local_pv(c: Cluster, name: str, path: str, mode: str, sc: str) -> dict:
    hostname = get(c, "node", c.node)["metadata"]["labels"]["kubernetes.io/hostname"]
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": "16Mi"}, "accessModes": ["ReadWriteOnce"], "volumeMode": mode,
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": sc,
                     "local": {"path": path},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                         {"key": "kubernetes.io/hostname", "operator": "In", "values": [hostname]}]}]}}}}


def test_block_volume_on_a_loop_device_written_and_read_in_a_pod(cluster, tmp_path):
    c = cluster
    dev = _loop_device(tmp_path / "block.img", 16 << 20)
    name = unique("blk").lower()
    try:
        apply(c, _local_pv(c, name, dev, "Block", "manual-block"),
              claim("blk", "16Mi", "manual-block", volumeMode="Block"))
        p = pod("block-user", "echo block-data | dd of=/dev/xvda bs=512 count=1 conv=sync 2>/dev/null; "
                "dd if=/dev/xvda bs=10 count=1 2>/dev/null", [{"name": "b", "persistentVolumeClaim": {
                    "claimName": "blk"}}], [])
        p["spec"]["containers"][0]["volumeDevices"] = [{"name": "b", "devicePath": "/dev/xvda"}]
        del p["spec"]["containers"][0]["volumeMounts"]
        apply(c, p)
        done = succeeded(c, "block-user", timeout=120)
        assert done["status"]["phase"] == "Succeeded", c.kubectl("logs", "block-user", check=False)
        assert c.kubectl("logs", "block-user").rstrip("\n") == "block-data"
        with open(dev, "rb") as f:
            assert f.read(11) == b"block-data\n"  # on the host's device, as written in the pod
        delete(c, "block-user")
        # the same claim in volumeMounts: refused with the populator's reason
        apply(c, pod("block-as-fs", "true", [{"name": "b", "persistentVolumeClaim": {"claimName": "blk"}}],
                     [{"name": "b", "mountPath": "/b"}]))
        ev = wait_for(c, "a FailedMount event", lambda: [e for e in c.events("block-as-fs")
                                                         if e["reason"] == "FailedMount"])
        assert "volume b has volumeMode Block, but is specified in volumeMounts" in ev[0]["message"]
        delete(c, "block-as-fs")
        c.kubectl("delete", "pvc", "blk", "--wait=true", "--timeout=60s")
    finally:
        c.kubectl("delete", "pv", name, "--wait=true", "--timeout=60s", check=False)
        subprocess.run(["losetup", "-d", dev], check=False)


def test_volume_stats_match_df_in_the_summary_and_metrics(cluster, tmp_path):
    c = cluster
    disk = tmp_path / "fs"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], check=True)
    name = unique("fs").lower()
    try:
        apply(c, _local_pv(c, name, str(disk), "Filesystem", "manual-fs"),
              claim("fsclaim", "8Mi", "manual-fs"))
        apply(c, pod("stats-user", "dd if=/dev/zero of=/data/blob bs=1024 count=2048; sleep 3600",
                     [{"name": "data", "persistentVolumeClaim": {"claimName": "fsclaim"}}],
                     [{"name": "data", "mountPath": "/data"}], securityContext={"fsGroup": 3456}))
        c.wait_pod("stats-user", _running, timeout=120)
        # the local plugin owned the volume for the pod's fsGroup at its first mount
        assert c.kubectl("exec", "stats-user", "--", "stat", "-c", "%g %A", "/data").split() == \
            ["3456", "drwxrwsrwt"]
        blob = disk / "blob"
        wait_for(c, "the pod's 2 MiB", lambda: blob.exists() and blob.stat().st_size == 2 << 20)
        raw = f"/api/v1/nodes/{c.node}/proxy/stats/summary"
        entry = wait_for(c, "the volume in the summary", lambda: next(
            (v for p in json.loads(c.kubectl("get", "--raw", raw))["pods"]
             if p["podRef"]["name"] == "stats-user"
             for v in p.get("volume", []) if v["name"] == "data"), None))
        df = subprocess.run(["df", "-B1", "--output=size,used,avail,itotal,iused,iavail", str(disk)],
                            check=True, capture_output=True, text=True).stdout.splitlines()[1].split()
        size, used, avail, itotal, iused, iavail = (int(x) for x in df)
        assert entry["pvcRef"] == {"name": "fsclaim", "namespace": "default"}
        assert (entry["capacityBytes"], entry["usedBytes"], entry["availableBytes"]) == (size, used, avail)
        assert (entry["inodes"], entry["inodesUsed"], entry["inodesFree"]) == (itotal, iused, iavail)
        assert used >= 2 << 20
        metrics = c.kubectl("get", "--raw", f"/api/v1/nodes/{c.node}/proxy/metrics")
        labels = '{namespace="default",persistentvolumeclaim="fsclaim"}'
        values = {m.split("{")[0]: float(m.split()[-1]) for m in metrics.splitlines() if labels in m}
        assert values["kubelet_volume_stats_used_bytes"] == used
        assert values["kubelet_volume_stats_capacity_bytes"] == size
        assert values["kubelet_volume_stats_available_bytes"] == avail
        assert values["kubelet_volume_stats_inodes_used"] == iused
        delete(c, "stats-user")
        c.kubectl("delete", "pvc", "fsclaim", "--wait=true", "--timeout=60s")
    finally:
        c.kubectl("delete", "pv", name, "--wait=true", "--timeout=60s", check=False)
        subprocess.run(["umount", str(disk)], check=False)


def test_restart_keeps_mounted_volumes_and_cleans_them_after_the_pods(cluster, tmp_path):
    c = cluster
    shared = tmp_path / "shared"
    install_driver(c, "nodeagent/bind")
    apply(c, pod("keeper", "echo $RANDOM > /data/token; sleep 3600",
                 [{"name": "data", "flexVolume": {"driver": "nodeagent/bind",
                                                  "options": {"source": str(shared)}}},
                  {"name": "scratch", "emptyDir": {}}],
                 [{"name": "data", "mountPath": "/data"},
                  {"name": "scratch", "mountPath": "/s", "subPath": "in"}],
                 nodeName=c.node, restartPolicy="Always"))
    before = c.wait_pod("keeper", _running, timeout=90)
    uid = before["metadata"]["uid"]
    mounted = sorted(mounts_of(uid))
    assert any(m.endswith("/volumes/nodeagent~bind/data") for m in mounted)
    assert any("/volume-subpaths/scratch/c/1" in m for m in mounted)
    assert c.stop() == 0
    assert sorted(mounts_of(uid)) == mounted  # the agent's stop leaves running pods' volumes mounted
    c.start()
    time.sleep(2)  # relists and a sync of the re-adopted pod
    after = c.wait_pod("keeper", _running)
    assert after["status"]["containerStatuses"][0]["restartCount"] == 0
    assert sorted(mounts_of(uid)) == mounted
    # after the restart the summary knows the pod's volumes again (the actual state, reconstructed)
    raw = f"/api/v1/nodes/{c.node}/proxy/stats/summary"
    wait_for(c, "scratch in the summary", lambda: any(
        v["name"] == "scratch" for p in json.loads(c.kubectl("get", "--raw", raw))["pods"]
        if p["podRef"]["name"] == "keeper" for v in p.get("volume", [])))
    delete(c, "keeper")
    wait_for(c, "the pod's mounts gone", lambda: mounts_of(uid) == [])
    assert not (c.data_dir / "kubelet" / "pods" / uid).exists()
    assert (shared / "token").exists()
