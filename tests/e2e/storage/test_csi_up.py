"""The CSI driver called the CSI way on `nodeagent up` (issue 22 item 4), with kubectl and the real kernel.

`up` runs `nodeagent csi`, which registers through the kubelet's plugins_registry; the kubelet writes the
CSINode and stages/publishes the driver's volumes where the kubelet does; the `csi-hostpath` class
provisions through the external-provisioner pattern. Also: inline CSI volumes, generic ephemeral volumes
(the claim owned by the pod), clones, and refusals with their reasons.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.kubelet.test_node_up import BUSYBOX, Cluster, _running, _wait_runtime_empty
from tests.e2e.storage.test_local_path_up import (
    apply,
    claim,
    event_reasons,
    get,
    gone,
    pod_on_claim,
    wait_for,
)
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

DRIVER = "hostpath.csi.nodeagent.io"
KUBECTL_120 = Path(__file__).resolve().parents[3] / ".cache" / "kubectl-1.20" / "usr" / "bin" / "kubectl"
TOPOLOGY_KEY = "topology.hostpath.csi/node"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, images):
    d = tmp_path_factory.mktemp("up-csi")
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(d / "images"), "import",
                    "--no-progress", str(images.busybox.docker_archive)], check=True, capture_output=True)
    c = Cluster(d, unique("nd"), unique("kb"))
    try:
        c.start()
        yield c
    finally:
        c.kubectl("delete", "pods", "--all", "--wait=true", "--timeout=90s", check=False)
        c.kubectl("delete", "pvc", "--all", "--wait=true", "--timeout=60s", check=False)
        _wait_runtime_empty(c)
        rc = c.stop()
    assert rc == 0, c.tail()
    assert str(d) not in Path("/proc/mounts").read_text(), "a mount under the data dir outlived `up`"


def mounted(path: Path) -> bool:
    return any(line.split()[4] == str(path) for line in Path("/proc/self/mountinfo").read_text().splitlines())


def driver_volumes(c: Cluster) -> set[str]:
    d = c.data_dir / "csi" / "volumes"
    return {p.name for p in d.iterdir()} if d.is_dir() else set()


def test_driver_registered_through_the_plugin_watcher(cluster):
    c = cluster
    csinode = wait_for(c, "the driver in CSINode", lambda: [
        d for d in (get(c, "csinode", c.node).get("spec") or {}).get("drivers") or [] if d["name"] == DRIVER])
    assert csinode == [{"name": DRIVER, "nodeID": c.node, "topologyKeys": [TOPOLOGY_KEY]}]
    owner = get(c, "csinode", c.node)["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Node" and owner["name"] == c.node
    node = get(c, "node", c.node)
    assert node["metadata"]["labels"][TOPOLOGY_KEY] == c.node
    assert json.loads(node["metadata"]["annotations"]["csi.volume.kubernetes.io/nodeid"]) == {DRIVER: c.node}
    drv = get(c, "csidriver", DRIVER)["spec"]
    assert drv["attachRequired"] is False and drv["podInfoOnMount"] is True
    assert drv["volumeLifecycleModes"] == ["Persistent", "Ephemeral"] and drv["fsGroupPolicy"] == "File"
    sc = get(c, "storageclass", "csi-hostpath")
    assert sc["provisioner"] == DRIVER and sc["volumeBindingMode"] == "WaitForFirstConsumer"
    assert "csi-hostpath" in c.kubectl("get", "csinodes,csidrivers,storageclasses")
    # the registration socket in the kubelet's plugin dir (a throwaway instance's: <data dir>/reg, short, as a
    # unix socket path must be)
    assert (c.data_dir / "reg" / "csi.sock").is_socket() and (c.data_dir / "csi.sock").is_socket()
    # kubectl 1.20 reads the storage.k8s.io/v1 objects too
    old = subprocess.run([str(KUBECTL_120), "get", "csinode", c.node, "-o", "json"], capture_output=True,
                         text=True, env=c.env, check=True)
    assert json.loads(old.stdout)["spec"]["drivers"][0]["name"] == DRIVER


def test_claim_staged_published_and_kept_across_pods(cluster):
    c = cluster
    apply(c, claim("csi1", cls="csi-hostpath"),
          pod_on_claim("csi-writer", "csi1", "echo kept > /data/file && sleep 3600"))
    writer = c.wait_pod("csi-writer", _running, timeout=120)
    pvc = get(c, "pvc", "csi1")
    assert pvc["status"]["phase"] == "Bound"
    pv = get(c, "pv", pvc["spec"]["volumeName"])
    src = pv["spec"]["csi"]
    assert src["driver"] == DRIVER and src["volumeHandle"]
    assert pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == DRIVER
    assert "external-provisioner.volume.kubernetes.io/finalizer" in pv["metadata"]["finalizers"]
    term = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    assert term == {"key": TOPOLOGY_KEY, "operator": "In", "values": [c.node]}
    reasons = event_reasons(c, "csi1")
    assert reasons["ProvisioningSucceeded"] == f"Successfully provisioned volume {pv['metadata']['name']}"
    assert src["volumeHandle"] in driver_volumes(c)

    # staged at the kubelet's globalmount, published under the pod, as the kubelet's CSI plugin does
    digest = hashlib.sha256(src["volumeHandle"].encode()).hexdigest()
    staging = c.data_dir / "kubelet" / "plugins" / "kubernetes.io" / "csi" / DRIVER / digest / "globalmount"
    target = c.data_dir / "kubelet" / "pods" / writer["metadata"]["uid"] / "volumes" / "kubernetes.io~csi" / \
        pv["metadata"]["name"] / "mount"
    assert mounted(staging) and mounted(target)
    vol_data = json.loads((target.parent / "vol_data.json").read_text())
    assert vol_data["driverName"] == DRIVER and vol_data["volumeHandle"] == src["volumeHandle"]
    wait_for(c, "the writer's file", lambda: (c.data_dir / "csi" / "volumes" / src["volumeHandle"] / "file")
             .exists())

    c.kubectl("delete", "pod", "csi-writer", "--wait=true", "--timeout=60s")
    wait_for(c, "unpublish and unstage", lambda: not mounted(target) and not mounted(staging))
    assert not target.parent.exists()
    apply(c, pod_on_claim("csi-reader", "csi1", "cat /data/file"))
    c.wait_pod("csi-reader", lambda p: p["status"].get("phase") == "Succeeded", timeout=120)
    assert c.kubectl("logs", "csi-reader") == "kept\n"

    # a clone of the claim carries the data
    source = {"kind": "PersistentVolumeClaim", "name": "csi1"}
    clone = claim("csi1-clone", cls="csi-hostpath", dataSource=source)
    apply(c, clone, pod_on_claim("csi-clone-reader", "csi1-clone", "cat /data/file"))
    c.wait_pod("csi-clone-reader", lambda p: p["status"].get("phase") == "Succeeded", timeout=120)
    assert c.kubectl("logs", "csi-clone-reader") == "kept\n"

    # the kubelet's csi_operations_seconds, as kube's: per driver, method and gRPC code
    metrics = c.kubectl("get", "--raw", f"/api/v1/nodes/{c.node}/proxy/metrics")
    assert f'csi_operations_seconds_count{{driver_name="{DRIVER}",grpc_status_code="OK",' \
           'method_name="/csi.v1.Node/NodePublishVolume",migrated="false"}' in metrics
    c.kubectl("delete", "pod", "csi-reader", "csi-clone-reader", "--wait=true", "--timeout=60s")
    c.kubectl("delete", "pvc", "csi1", "csi1-clone", "--wait=true", "--timeout=60s")
    wait_for(c, "DeleteVolume and the PV gone",
             lambda: gone(c, "pv", pv["metadata"]["name"]) and src["volumeHandle"] not in driver_volumes(c))


def test_inline_csi_volume_lives_with_its_pod(cluster):
    c = cluster
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "inline"},
           "spec": {"terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                                    "command": ["sh", "-c", "echo hi > /scratch/f && sleep 3600"],
                                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
                    "volumes": [{"name": "scratch", "csi": {"driver": DRIVER}}]}}
    apply(c, pod)
    running = c.wait_pod("inline", _running, timeout=120)
    handle = "csi-" + hashlib.sha256((running["metadata"]["uid"] + "scratch").encode()).hexdigest()
    wait_for(c, "the inline volume's file",
             lambda: (c.data_dir / "csi" / "volumes" / handle / "f").exists())
    c.kubectl("delete", "pod", "inline", "--wait=true", "--timeout=60s")
    wait_for(c, "the inline volume removed", lambda: handle not in driver_volumes(c))


def test_generic_ephemeral_volume_claim_owned_by_the_pod(cluster):
    c = cluster
    tpl = {"spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "csi-hostpath",
                    "resources": {"requests": {"storage": "32Mi"}}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "eph"},
           "spec": {"terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                                    "command": ["sh", "-c", "echo e > /work/f && sleep 3600"],
                                    "volumeMounts": [{"name": "work", "mountPath": "/work"}]}],
                    "volumes": [{"name": "work", "ephemeral": {"volumeClaimTemplate": tpl}}]}}
    apply(c, pod)
    running = c.wait_pod("eph", _running, timeout=120)
    pvc = get(c, "pvc", "eph-work")
    owner = pvc["metadata"]["ownerReferences"][0]
    assert owner["kind"] == "Pod" and owner["uid"] == running["metadata"]["uid"] and owner["controller"]
    assert pvc["status"]["phase"] == "Bound"
    pv_name = pvc["spec"]["volumeName"]
    c.kubectl("delete", "pod", "eph", "--wait=true", "--timeout=60s")
    wait_for(c, "the claim and volume deleted with the pod",
             lambda: gone(c, "pvc", "eph-work") and gone(c, "pv", pv_name), timeout=120)


def test_a_claim_not_owned_by_the_pod_is_refused(cluster):
    c = cluster
    apply(c, claim("stolen-work", cls="csi-hostpath"))
    tpl = {"spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "csi-hostpath",
                    "resources": {"requests": {"storage": "32Mi"}}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stolen"},
           "spec": {"terminationGracePeriodSeconds": 1, "nodeName": c.node,
                    "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                                    "command": ["sleep", "3600"],
                                    "volumeMounts": [{"name": "work", "mountPath": "/work"}]}],
                    "volumes": [{"name": "work", "ephemeral": {"volumeClaimTemplate": tpl}}]}}
    apply(c, pod)
    msg = wait_for(c, "the refusal", lambda: event_reasons(c, "stolen").get("FailedMount"))
    assert "PVC default/stolen-work was not created for pod default/stolen (pod is not owner)" in msg
    c.kubectl("delete", "pod", "stolen", "--wait=true", "--timeout=60s")
    c.kubectl("delete", "pvc", "stolen-work", "--wait=true", "--timeout=60s")


def test_snapshot_and_restore_through_the_api(cluster):
    c = cluster
    snapclass = {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
                 "metadata": {"name": "csi-hostpath-snapclass",
                              "annotations": {"snapshot.storage.kubernetes.io/is-default-class": "true"}},
                 "driver": DRIVER, "deletionPolicy": "Delete"}
    wait_for(c, "the snapshot CRDs", lambda: "volumesnapshots" in c.kubectl("api-resources", check=False))
    apply(c, snapclass, claim("snap-src", cls="csi-hostpath"),
          pod_on_claim("snap-writer", "snap-src", "echo v1 > /data/file && sleep 3600"))
    c.wait_pod("snap-writer", _running, timeout=120)
    handle = get(c, "pv", get(c, "pvc", "snap-src")["spec"]["volumeName"])["spec"]["csi"]["volumeHandle"]
    data = c.data_dir / "csi" / "volumes" / handle / "file"
    wait_for(c, "the writer's file", lambda: data.exists() and data.read_text() == "v1\n")

    snap = {"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
            "metadata": {"name": "snap1"}, "spec": {"source": {"persistentVolumeClaimName": "snap-src"}}}
    apply(c, snap)
    vs = wait_for(c, "the snapshot ready",
                  lambda: (lambda o: o if (o.get("status") or {}).get("readyToUse") else None)(
                      get(c, "volumesnapshot", "snap1")))
    content = get(c, "volumesnapshotcontent", vs["status"]["boundVolumeSnapshotContentName"])
    assert content["spec"]["driver"] == DRIVER and content["spec"]["source"] == {"volumeHandle": handle}
    assert content["spec"]["volumeSnapshotRef"]["uid"] == vs["metadata"]["uid"]
    snapshot_id = content["status"]["snapshotHandle"]
    assert (c.data_dir / "csi" / "snapshots" / f"{snapshot_id}.tar.gz").exists()
    assert "SnapshotReady" in event_reasons(c, "snap1")

    data.write_text("v2\n")  # the source changes after the snapshot
    source = {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "snap1"}
    restore = claim("snap-restore", cls="csi-hostpath", dataSource=source)
    apply(c, restore, pod_on_claim("snap-reader", "snap-restore", "cat /data/file"))
    c.wait_pod("snap-reader", lambda p: p["status"].get("phase") == "Succeeded", timeout=120)
    assert c.kubectl("logs", "snap-reader") == "v1\n"

    c.kubectl("delete", "volumesnapshot", "snap1", "--wait=true", "--timeout=60s")
    wait_for(c, "DeleteSnapshot and the content gone",
             lambda: gone(c, "volumesnapshotcontent", content["metadata"]["name"])
             and not (c.data_dir / "csi" / "snapshots" / f"{snapshot_id}.tar.gz").exists())
    c.kubectl("delete", "pod", "snap-writer", "snap-reader", "--wait=true", "--timeout=60s")
    c.kubectl("delete", "pvc", "snap-src", "snap-restore", "--wait=true", "--timeout=60s")
    c.kubectl("delete", "volumesnapshotclass", "csi-hostpath-snapclass", "--wait=true", check=False)


def test_restarting_up_keeps_the_pod_and_its_csi_volume(cluster):
    c = cluster
    apply(c, claim("csi-keep", cls="csi-hostpath"),
          pod_on_claim("csi-survivor", "csi-keep", "echo before > /data/f && sleep 3600"))
    before = c.wait_pod("csi-survivor", _running, timeout=120)
    pv = get(c, "pv", get(c, "pvc", "csi-keep")["spec"]["volumeName"])
    target = c.data_dir / "kubelet" / "pods" / before["metadata"]["uid"] / "volumes" / "kubernetes.io~csi" / \
        pv["metadata"]["name"] / "mount"
    wait_for(c, "the file", lambda: (target / "f").exists())
    assert c.stop() == 0
    assert mounted(target), "the pod's volume went with `up`"
    c.start()
    wait_for(c, "the driver registered again", lambda: [
        d for d in (get(c, "csinode", c.node).get("spec") or {}).get("drivers") or [] if d["name"] == DRIVER])
    after = c.wait_pod("csi-survivor", _running)
    assert after["status"]["containerStatuses"][0]["containerID"] == \
        before["status"]["containerStatuses"][0]["containerID"]
    assert (target / "f").read_text() == "before\n"
    c.kubectl("delete", "pod", "csi-survivor", "--wait=true", "--timeout=60s")
    wait_for(c, "unpublished after the restart", lambda: not mounted(target))
    c.kubectl("delete", "pvc", "csi-keep", "--wait=true", "--timeout=60s")
    handle = pv["spec"]["csi"]["volumeHandle"]
    wait_for(c, "DeleteVolume after the restart", lambda: handle not in driver_volumes(c))
