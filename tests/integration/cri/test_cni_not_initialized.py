"""A runtime with no CNI network config refuses pod-network sandboxes as containerd does, and reports
NetworkReady=false; host-network sandboxes still start, and a conflist dropped in later is used."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import grpc
import pytest

from cri.client import sandbox_config
from cri.runtime.service import RuntimeOptions
from tests.harness.resources import JANITOR, del_link, free_subnet, remove_cgroup, unique
from tests.integration.cri.conftest import Pods
from tests.integration.cri.containerd import Containerd, available
from tests.integration.cri.daemon import CRIDaemon, mounts_under

pytestmark = pytest.mark.root

REFUSED = re.compile(r'failed to setup network for sandbox "[0-9a-f]{64}": cni plugin not initialized$')


def _conditions(client) -> dict[str, tuple[bool, str, str]]:
    return {c.type: (c.status, c.reason, c.message) for c in client.status().status.conditions}


@pytest.fixture(params=["nodeagent", "containerd"])
def bare(request, tmp_path, images):
    """A runtime whose CNI conf dir is empty: ours, or containerd (the reference) when installed."""
    d: CRIDaemon | Containerd
    if request.param == "nodeagent":
        d = CRIDaemon(tmp_path / "cri", network=False)
        d.import_images([images.busybox.docker_archive])
    else:
        why = available()
        if why:
            pytest.skip(why)
        d = Containerd(tmp_path / "containerd")
    d.start()
    if isinstance(d, Containerd):
        d.import_images(images, RuntimeOptions(state_dir=tmp_path).pause, [])
    pods = Pods(d, tmp_path)  # type: ignore[arg-type]  # a Pods helper over either runtime's client
    try:
        yield d, pods
    finally:
        if isinstance(d, Containerd) and d.client is not None:
            # containerd 1.6 may keep the refused sandbox (and its netns), and cannot stop it until a CNI
            # network is loaded: give it a loopback-only one; it leaves pod cgroup parents to the kubelet
            (d.cni_conf / "10-lo.conflist").write_text(json.dumps(
                {"cniVersion": "0.4.0", "name": "lo", "plugins": [{"type": "loopback"}]}))
            deadline = time.monotonic() + 10
            while _conditions(d.client)["NetworkReady"][0] is not True and time.monotonic() < deadline:
                time.sleep(0.1)
            for s in d.client.list_pod_sandbox():
                d.client.stop_pod_sandbox(s.id)
                d.client.remove_pod_sandbox(s.id)
            for parent in pods.parents:
                for root in _cgroup_roots():
                    remove_cgroup(Path(root + parent))
            pods.ids.clear()
        pods.close()
        d.stop()


def test_pod_network_is_refused_and_host_network_starts(bare):
    d, pods = bare
    c = d.client
    assert _conditions(c)["NetworkReady"] == (False, "NetworkPluginNotReady",
                                              "Network plugin returns error: cni plugin not initialized")
    assert _conditions(c)["RuntimeReady"][0] is True
    with pytest.raises(grpc.RpcError) as e:
        c.run_pod_sandbox(pods.config())
    assert e.value.code() == grpc.StatusCode.UNKNOWN
    assert REFUSED.search(e.value.details() or ""), e.value.details()
    # containerd 1.6 may still list the refused sandbox as NOTREADY; ours never made one
    left = c.list_pod_sandbox()
    assert all(s.state == 1 for s in left) if isinstance(d, Containerd) else left == []
    parent = "/" + unique("cg")
    pods.parents.append(parent)
    sid, _ = pods.run(sandbox_config(unique("hn"), host_network=True, cgroup_parent=parent))
    st = c.pod_sandbox_status(sid).status
    assert st.state == 0 and st.network.ip == ""  # SANDBOX_READY, on the node's network


def test_refusal_leaves_nothing_and_a_conflist_dropped_in_is_used(tmp_path, images):
    d = CRIDaemon(tmp_path / "cri", network=False)
    d.import_images([images.busybox.docker_archive])
    c = d.start()
    pods = Pods(d, tmp_path)
    bridge = unique("cb")
    try:
        verbose = c.status(verbose=True)
        assert verbose.info["lastCNILoadStatus"] == (
            f"cni config load failed: no network config found in {d.cni_conf}: cni plugin not initialized: "
            "failed to load cni config")
        name = unique("refused")
        cfg = pods.config(name=name)
        with pytest.raises(grpc.RpcError) as e:
            c.run_pod_sandbox(cfg)
        assert e.value.code() == grpc.StatusCode.UNKNOWN and REFUSED.search(e.value.details() or "")
        # nothing half-made: no record, sandbox dir, cgroup, mount or pause process
        assert c.list_pod_sandbox() == []
        sandboxes = d.state / "sandboxes"
        assert not sandboxes.exists() or os.listdir(sandboxes) == []
        assert mounts_under(d.root) == []
        assert not any(Path(r + cfg.linux.cgroup_parent).exists() for r in _cgroup_roots())
        assert _processes_naming(name) == []  # pause would carry the pod's hostname in its argv
        assert "failed to setup network for sandbox" in d.log.read_text()

        # a network appears: the next Status and RunPodSandbox (same name: it was never reserved) use it
        JANITOR.register(f"link {bridge}", lambda: del_link(bridge))
        (d.cni_conf / "10-late.conflist").write_text(json.dumps({
            "cniVersion": "1.0.0", "name": f"late-{bridge}", "plugins": [
                {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": str(free_subnet())}]],
                          "dataDir": str(tmp_path / "ipam")}}]}))
        assert _conditions(c)["NetworkReady"] == (True, "", "")
        assert c.status(verbose=True).info["lastCNILoadStatus"] == "OK"
        sid = c.run_pod_sandbox(cfg)
        pods.ids.append(sid)
        assert c.pod_sandbox_status(sid).status.network.ip.startswith("10.")
    finally:
        pods.close()
        d.remove_everything()
        d.stop()
        JANITOR.release(f"link {bridge}")


def _cgroup_roots() -> set[str]:
    """Every cgroup hierarchy: runc under containerd makes a pod's cgroup parent in the named ones
    (name=systemd) and a hybrid host's unified tree too, not only in the controllers'."""
    from kernel.cgroups import hierarchies

    return set(hierarchies())


def _processes_naming(word: str) -> list[int]:
    """Processes whose command line has `word` as an argument."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if word.encode() in argv:
            out.append(int(entry))
    return out
