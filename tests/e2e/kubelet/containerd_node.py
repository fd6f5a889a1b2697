"""`nodeagent up` on Debian's containerd (`--container-runtime-endpoint`): one setup for every such test.

containerd runs under a private root with the reference bridge plugin on a bridge and subnet of its own;
on exit every pod is deleted, containerd's sandboxes are removed, and `up`, containerd and the bridge stop.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.testing.images import ImageFactory
from tests.e2e.kubelet.test_node_up import Cluster
from tests.harness.resources import unique
from tests.integration.cri.containerd import Containerd, available


@contextlib.contextmanager
def containerd_up(tmp: Path, images: ImageFactory, octet: int) -> Iterator[tuple[Cluster, Containerd]]:
    """`octet` picks the pod subnet 10.<octet + n % 40>.<n>.0/24, so modules using this do not overlap."""
    why = available()
    if why:
        pytest.skip(why)
    from cri.runtime.service import RuntimeOptions

    bridge = unique("kc")
    n = (os.getpid() + octet) % 250
    conf = {"cniVersion": "0.4.0", "name": f"kubelet-{bridge}", "plugins": [
        {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False,
         "ipam": {"type": "host-local", "dataDir": str(tmp / "ipam"),
                  "ranges": [[{"subnet": f"10.{octet + n % 40}.{n}.0/24"}]],
                  "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "loopback"}]}
    ctd = Containerd(tmp / "ctd")
    ctd.cni_conf.mkdir(parents=True, exist_ok=True)
    (ctd.cni_conf / "10-kubelet.conflist").write_text(json.dumps(conf))
    ctd.start()
    data = tmp / "up"
    data.mkdir()
    c = Cluster(data, unique("nd"), unique("kb"))
    c.extra = ["--container-runtime-endpoint", f"unix://{ctd.socket}"]
    try:
        ctd.import_images(images, RuntimeOptions(state_dir=tmp / "x").pause, [images.httpd.spec])
        c.start()
        yield c, ctd
    finally:
        c.kubectl("delete", "pods", "--all", "--wait=true", "--timeout=60s", check=False)
        if ctd.client is not None:
            for s in ctd.client.list_pod_sandbox():
                ctd.client.stop_pod_sandbox(s.id)
                ctd.client.remove_pod_sandbox(s.id)
        rc = c.stop() if c.proc is not None else 0
        ctd.stop()
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
    assert rc == 0, c.tail()
    assert not os.path.exists(f"/sys/class/net/{bridge}")
