"""Garbage collection and disk pressure on a real node.

Image GC by thresholds: `--image-gc-high-threshold 1 --image-gc-low-threshold 0` keeps the image
filesystem "over the threshold" on any machine, so each pass removes every unused image old enough (httpd)
while the image a pod runs (busybox) stays, and records FreeDiskSpaceFailed, then ImageGCFailed, on the
Node; `--maximum-dead-containers 1` removes the older of two finished pods' dead containers.

Disk pressure: `--eviction-hard nodefs.available<(available now − 1Gi)`, then a pod writes 2 GiB into
its emptyDir: the eviction manager first removes dead containers and unused images, then evicts the pod
using the most ephemeral storage, with kubelet's message and event; the node reports DiskPressure and
refuses new pods with kubelet's reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.kubelet.test_node_up import BUSYBOX, HTTPD, Cluster, _running, _wait_runtime_empty
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


def _pod(name: str, command: list[str], restart: str = "Always", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, "restartPolicy": restart,
                     "containers": [{"name": "app", "image": BUSYBOX, "imagePullPolicy": "Never",
                                     "command": command}], **spec}}


def _import(tmp_path: Path, *imgs: Any) -> None:
    for img in imgs:
        subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(tmp_path / "images"),
                        "import", "--no-progress", str(img.docker_archive)], check=True, capture_output=True)


def _cri(c: Cluster) -> Any:
    from cri.client import CRIClient

    return CRIClient(str(c.data_dir / "cri.sock"))


def _image_tags(c: Cluster) -> set[str]:
    cri = _cri(c)
    try:
        return {t for i in cri.list_images() for t in i.repo_tags}
    finally:
        cri.close()


def _containers_of(c: Cluster, uid: str) -> list[Any]:
    cri = _cri(c)
    try:
        return cri.list_containers(label_selector={"io.kubernetes.pod.uid": uid})
    finally:
        cri.close()


def _node_events(c: Cluster) -> list[dict[str, Any]]:
    out = c.kubectl("get", "events", "-A", "--field-selector",
                    f"involvedObject.kind=Node,involvedObject.name={c.node}", "-o", "json")
    return json.loads(out)["items"]


def _until(c: Cluster, what: str, pred, timeout: float = 90) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, f"never: {what}\n{c.tail()}"
        time.sleep(0.5)


def _succeeded(p: dict[str, Any]) -> bool:
    return (p.get("status") or {}).get("phase") == "Succeeded"


def _stop(c: Cluster) -> int:
    c.kubectl("delete", "pods", "--all", "--wait=true", "--timeout=60s", check=False)
    _wait_runtime_empty(c)
    return c.stop()


def test_image_and_container_gc_by_policy(tmp_path, images):
    _import(tmp_path, images.busybox, images.httpd)
    c = Cluster(tmp_path, unique("nd"), unique("kb"))
    c.extra = ["--eviction-hard", "memory.available<1Mi", "--image-gc-high-threshold", "1",
               "--image-gc-low-threshold", "0", "--image-minimum-gc-age", "20s", "--image-gc-period", "3s",
               "--maximum-dead-containers", "1", "--container-gc-period", "2s"]
    rc = 0
    try:
        c.start()
        c.apply(_pod("keeper", ["sleep", "3600"]))
        c.wait_pod("keeper", _running)
        c.apply(_pod("done1", ["true"], restart="Never"))
        first = c.wait_pod("done1", _succeeded)
        c.apply(_pod("done2", ["true"], restart="Never"))
        second = c.wait_pod("done2", _succeeded)
        # two dead containers, one allowed on the node: the older pod's goes
        _until(c, "the older dead container removed", lambda: not _containers_of(c, first["metadata"]["uid"]))
        assert len(_containers_of(c, second["metadata"]["uid"])) == 1
        assert c.pod("done1")["status"]["phase"] == "Succeeded"  # the pod object keeps its status
        # images are 20 s old: httpd (unused) goes, busybox (used) stays
        _until(c, "httpd removed", lambda: HTTPD not in _image_tags(c))
        assert BUSYBOX in _image_tags(c)
        _until(c, "ImageGCFailed on the node",
               lambda: "ImageGCFailed" in {e["reason"] for e in _node_events(c)})
        ev = {e["reason"]: e for e in _node_events(c)}
        assert ev["FreeDiskSpaceFailed"]["type"] == "Warning"
        assert "Failed to garbage collect required amount of images. Attempted to free" in \
            ev["ImageGCFailed"]["message"]
        assert ev["ImageGCFailed"]["source"]["component"] == "kubelet"
    finally:
        if c.proc is not None:
            rc = _stop(c)
    assert rc == 0, c.tail()


def test_disk_pressure_reclaims_then_evicts_the_biggest_user(tmp_path, images):
    _import(tmp_path, images.busybox, images.httpd)
    st = os.statvfs(tmp_path)
    threshold = st.f_bavail * st.f_frsize - (1 << 30)
    c = Cluster(tmp_path, unique("nd"), unique("kb"))
    c.extra = ["--eviction-hard", f"nodefs.available<{threshold}", "--housekeeping-interval", "2",
               "--image-gc-high-threshold", "100", "--image-minimum-gc-age", "0s",
               "--eviction-pressure-transition-period", "5m"]
    rc = 0
    try:
        c.start()
        c.apply(_pod("keeper", ["sleep", "3600"]))
        c.wait_pod("keeper", _running)
        c.apply(_pod("finished", ["true"], restart="Never"))
        finished = c.wait_pod("finished", _succeeded)
        assert _containers_of(c, finished["metadata"]["uid"]) and HTTPD in _image_tags(c)
        fill = "dd if=/dev/zero of=/scratch/fill bs=1M count=2048; sleep 3600"
        writer_pod = _pod("writer", ["sh", "-c", fill], volumes=[{"name": "scratch", "emptyDir": {}}])
        writer_pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
        c.apply(writer_pod)
        writer = c.wait_pod("writer", lambda p: (p.get("status") or {}).get("phase") == "Failed", timeout=120)
        st_ = writer["status"]
        assert st_["reason"] == "Evicted", st_
        assert st_["message"].startswith("The node was low on resource: ephemeral-storage. "), st_
        assert "Evicted" in {e["reason"] for e in c.events("writer")}
        # node-level resources went first: the finished pod's dead container and the unused image
        assert not _containers_of(c, finished["metadata"]["uid"])
        assert HTTPD not in _image_tags(c) and BUSYBOX in _image_tags(c)
        assert c.pod("keeper")["status"]["phase"] == "Running"

        def disk_pressure() -> bool:  # published with the next node status (every 10 s), kept 5 m
            node = json.loads(c.kubectl("get", "node", c.node, "-o", "json"))
            return any(x["type"] == "DiskPressure" and x["status"] == "True"
                       for x in node["status"]["conditions"])

        _until(c, "DiskPressure on the node", disk_pressure, timeout=30)
        # new pods are refused while the condition holds (the transition period keeps it)
        c.apply(_pod("late", ["sleep", "3600"]))
        late = c.wait_pod("late", lambda p: (p.get("status") or {}).get("phase") == "Failed")["status"]
        assert late["reason"] == "Evicted" and "The node had condition: [DiskPressure]." in late["message"]
    finally:
        if c.proc is not None:
            rc = _stop(c)
    assert rc == 0, c.tail()


def test_ephemeral_storage_limits_and_empty_dir_size_limits_evict(tmp_path, images):
    """A pod writing past the sum of its containers' `ephemeral-storage` limits, a container past its own
    limit (within the pod's sum), and a pod filling its emptyDir past `sizeLimit` are evicted whatever the
    node's pressure, with kubelet's messages; a pod within its limit stays."""
    _import(tmp_path, images.busybox)
    c = Cluster(tmp_path, unique("nd"), unique("kb"))
    c.extra = ["--eviction-hard", "memory.available<1Mi", "--housekeeping-interval", "1"]
    rc = 0
    try:
        c.start()
        fill = "dd if=/dev/zero of={} bs=1M count=4; sleep 3600"
        rootfs = _pod("rootfs", ["sh", "-c", fill.format("/fill")])
        rootfs["spec"]["containers"][0]["resources"] = {"limits": {"ephemeral-storage": "1Mi"}}
        scratch = _pod("scratch", ["sh", "-c", fill.format("/scratch/fill")],
                       volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}])
        scratch["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
        within = _pod("within", ["sh", "-c", "dd if=/dev/zero of=/fill bs=1k count=10; sleep 3600"])
        within["spec"]["containers"][0]["resources"] = {"limits": {"ephemeral-storage": "64Mi"}}
        one = _pod("one", ["sh", "-c", fill.format("/fill")])
        one["spec"]["containers"][0]["resources"] = {"limits": {"ephemeral-storage": "1Mi"}}
        one["spec"]["containers"].append({"name": "roomy", "image": BUSYBOX, "imagePullPolicy": "Never",
                                          "command": ["sleep", "3600"],
                                          "resources": {"limits": {"ephemeral-storage": "64Mi"}}})
        for p in (rootfs, scratch, within, one):
            c.apply(p)

        def failed(p: dict[str, Any]) -> bool:
            return (p.get("status") or {}).get("phase") == "Failed"

        r = c.wait_pod("rootfs", failed, timeout=90)["status"]
        assert r["reason"] == "Evicted"
        assert r["message"] == "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. "
        o = c.wait_pod("one", failed, timeout=90)["status"]
        assert o["message"] == 'Container app exceeded its local ephemeral storage limit "1Mi". ', o
        s = c.wait_pod("scratch", failed, timeout=90)["status"]
        assert s["reason"] == "Evicted"
        assert s["message"] == 'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". '
        assert "Evicted" in {e["reason"] for e in c.events("scratch")}
        assert c.wait_pod("within", _running)["status"]["phase"] == "Running"
        time.sleep(3)  # a few more passes: still within its limit
        assert c.pod("within")["status"]["phase"] == "Running"
    finally:
        if c.proc is not None:
            rc = _stop(c)
    assert rc == 0, c.tail()
