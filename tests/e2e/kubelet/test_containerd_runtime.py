"""The kubelet on containerd's CRI socket (`up --container-runtime-endpoint`): it speaks plain runtime.v1.

containerd runs under a private root with the reference bridge plugin on its own bridge and subnet; the
pod runs, is reachable, and its deletion leaves no containerd sandbox and no pod cgroup (the kubelet
removes pod cgroups itself there, as runc leaves them).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.kubelet.test_node_up import HTTPD, Cluster, _cgroup_mounts, _running
from tests.harness.resources import unique
from tests.integration.cri.containerd import Containerd, available

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


def test_pod_runs_on_containerd(tmp_path, images):
    why = available()
    if why:
        pytest.skip(why)
    from cri.proto import api_pb2 as pb
    from cri.runtime.service import RuntimeOptions

    bridge = unique("kc")
    n = os.getpid() % 250
    conf = {"cniVersion": "0.4.0", "name": f"kubelet-{bridge}", "plugins": [
        {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False,
         "ipam": {"type": "host-local", "dataDir": str(tmp_path / "ipam"),
                  "ranges": [[{"subnet": f"10.{141 + n % 40}.{n}.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "loopback"}]}
    ctd = Containerd(tmp_path / "ctd")
    ctd.cni_conf.mkdir(parents=True, exist_ok=True)
    (ctd.cni_conf / "10-kubelet.conflist").write_text(json.dumps(conf))
    ctd.start()
    data = tmp_path / "up"
    data.mkdir()
    c = Cluster(data, unique("nd"), unique("kb"))
    c.extra = ["--container-runtime-endpoint", f"unix://{ctd.socket}"]
    try:
        ctd.import_images(images, RuntimeOptions(state_dir=tmp_path / "x").pause, [images.httpd.spec])
        c.start()
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
        f = pb.PodSandboxFilter()
        f.label_selector["io.kubernetes.pod.uid"] = uid
        assert not ctd.client.rt.ListPodSandbox(pb.ListPodSandboxRequest(filter=f)).items
        for m in _cgroup_mounts():
            assert not list(Path(m).glob(f"{c.cgroup_root()}/kubepods/**/pod{uid}")), f"pod cgroup left in {m}"
    finally:
        c.kubectl("delete", "pods", "--all", "--wait=true", "--timeout=60s", check=False)
        if ctd.client is not None:
            for s in ctd.client.rt.ListPodSandbox(pb.ListPodSandboxRequest()).items:
                ctd.client.stop_sandbox(s.id)
                ctd.client.remove_sandbox(s.id)
        rc = c.stop() if c.proc is not None else 0
        ctd.stop()
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
    assert rc == 0, c.tail()
    deadline = time.monotonic() + 5
    while any(Path(m, c.cgroup_root()).exists() for m in _cgroup_mounts()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(Path(m, c.cgroup_root()).exists() for m in _cgroup_mounts()), "the cgroup root outlived `up`"
