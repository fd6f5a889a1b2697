"""`volumes[].image` (KEP-4639, ImageVolume) through `nodeagent up`: the kubelet pulls the reference by its
pullPolicy and the runtime mounts the image read-only, whole or by the volumeMount's subPath; what cannot
be mounted leaves the container waiting with kubelet's reason, and the feature is advertised on /metrics."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.e2e.kubelet.test_node_up import BUSYBOX, HTTPD, _running, cluster  # noqa: F401 - the fixture
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


def _pod(name: str, reference: str, policy: str, sub_path: str = "") -> dict:
    mounts = [{"name": "site", "mountPath": "/site"}]
    if sub_path:
        mounts.append({"name": "site", "mountPath": "/www", "subPath": sub_path})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                                     "command": ["sleep", "3600"], "volumeMounts": mounts}],
                     "volumes": [{"name": "site", "image": {"reference": reference, "pullPolicy": policy}}]}}


def _waiting(reason: str):
    def pred(pod: dict) -> bool:
        cs = (pod.get("status") or {}).get("containerStatuses") or [{}]
        return ((cs[0].get("state") or {}).get("waiting") or {}).get("reason") == reason
    return pred


def test_image_volume_is_mounted_read_only(cluster):  # noqa: F811
    name = unique("imgvol")
    cluster.apply(_pod(name, HTTPD, "Never", sub_path="var/www"))
    try:
        pod = cluster.wait_pod(name, _running)
        assert pod["spec"]["volumes"][0]["image"]["pullPolicy"] == "Never"
        page = cluster.kubectl("exec", name, "--", "cat", "/www/index.html", "/site/var/www/index.html")
        assert page == "hello from busybox\n" * 2
        p = subprocess.run(["kubectl", "exec", name, "--", "touch", "/site/x"], capture_output=True,
                           text=True, env=cluster.env, timeout=60)
        assert p.returncode != 0 and "Read-only file system" in p.stderr, p
    finally:
        cluster.kubectl("delete", "pod", name, "--wait=true", "--timeout=60s", check=False)


def test_image_volume_that_cannot_be_had_keeps_the_container_waiting(cluster):  # noqa: F811
    absent, bad_sub = unique("imgnone"), unique("imgsub")
    cluster.apply(_pod(absent, "localhost/absent:v1", "Never"))
    cluster.apply(_pod(bad_sub, HTTPD, "Never", sub_path="no/such/dir"))
    try:
        cluster.wait_pod(absent, _waiting("ErrImageNeverPull"))
        pod = cluster.wait_pod(bad_sub, _waiting("CreateContainerError"))
        message = pod["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
        assert "does not exist in the image" in message, message
    finally:
        cluster.kubectl("delete", "pod", absent, bad_sub, "--wait=true", "--timeout=60s", check=False)


def test_image_volume_is_validated_and_advertised(cluster):  # noqa: F811
    pod = _pod(unique("imgbad"), "", "Sometimes")
    p = subprocess.run(["kubectl", "apply", "-f", "-"], input=json.dumps(pod), capture_output=True,
                       text=True, env=cluster.env, timeout=60)
    assert p.returncode != 0
    assert "spec.volumes[0].image.reference: Required value" in p.stderr, p.stderr
    assert 'spec.volumes[0].image.pullPolicy: Unsupported value: "Sometimes"' in p.stderr, p.stderr
    metrics = cluster.kubectl("get", "--raw", "/metrics")
    assert 'kubernetes_feature_enabled{name="ImageVolume",stage="BETA"} 1.0' in metrics
