"""The kubelet on containerd's CRI socket (`up --container-runtime-endpoint`): it speaks plain runtime.v1.

containerd runs under a private root with the reference bridge plugin on its own bridge and subnet; the
pod runs, is reachable, and its deletion leaves no containerd sandbox and no pod cgroup (the kubelet
removes pod cgroups itself there, as runc leaves them).
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from kernel.cgroups import hierarchies
from tests.e2e.kubelet.containerd_node import containerd_up
from tests.e2e.kubelet.test_node_up import HTTPD, _running

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


def test_pod_runs_on_containerd(tmp_path, images):

    with containerd_up(tmp_path, images, 141) as (c, ctd):
        node = json.loads(c.kubectl("get", "node", c.node, "-o", "json"))
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
        c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "on-containerd"},
                 "spec": {"terminationGracePeriodSeconds": 1,
                          "containers": [{"name": "httpd", "image": HTTPD, "imagePullPolicy": "Never"}]}})
        pod = c.wait_pod("on-containerd", _running, timeout=90)
        assert pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://")
        body = urllib.request.urlopen(f"http://{pod['status']['podIP']}/", timeout=10).read()
        assert body == b"hello from busybox\n"
        uid = pod["metadata"]["uid"]
        c.kubectl("delete", "pod", "on-containerd", "--wait=true", "--timeout=90s")
        assert ctd.client is not None
        assert not ctd.client.list_pod_sandbox(label_selector={"io.kubernetes.pod.uid": uid})
        for m in hierarchies():
            left = list(Path(m).glob(f"{c.cgroup_root()}/kubepods/**/pod{uid}"))
            assert not left, f"pod cgroup left in {m}"
    deadline = time.monotonic() + 5
    while any(Path(m, c.cgroup_root()).exists() for m in hierarchies()) and time.monotonic() < deadline:
        time.sleep(0.2)
    outlived = [m for m in hierarchies() if Path(m, c.cgroup_root()).exists()]
    assert not outlived, "the cgroup root outlived `up`"
