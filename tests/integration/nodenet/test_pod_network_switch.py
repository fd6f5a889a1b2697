"""A server restarted on its stored cluster with another --pod-network is refused with the reason (routes,
tunnels and BGP sessions are not migrated under running pods), and one restarted with the same mode runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time

from nodeagent.nodenet import annotations as ann
from nodeagent.testing.apiserver import start_server

LIGHT = ["--without", "scheduler", "--without", "ingress"]


def test_switching_a_running_clusters_pod_network_is_refused(tmp_path):
    data = tmp_path / "srv"
    s = start_server(data, datastore="sqlite", extra=[*LIGHT, "--pod-network", "vxlan"])
    try:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "switch-n1"}}
        subprocess.run(["kubectl", "apply", "-f", "-"], input=json.dumps(node), env=s.env(), check=True,
                       capture_output=True, text=True, timeout=60)

        def stamped() -> bool:
            out = subprocess.run(["kubectl", "get", "node", "switch-n1", "-o", "json"], env=s.env(),
                                 capture_output=True, text=True, timeout=60).stdout
            annotations = json.loads(out or "{}").get("metadata", {}).get("annotations", {})
            return annotations.get(ann.BACKEND) == "vxlan"
        end = time.monotonic() + 30
        while not stamped():
            assert time.monotonic() < end, s.log()[-2000:]
            time.sleep(0.2)
    finally:
        assert s.stop() == 0
    s = start_server(data, datastore="sqlite", extra=[*LIGHT, "--pod-network", "bgp"])
    try:
        code = s.proc.wait(60)
    finally:
        s.stop()
    assert code != 0
    log = s.log()
    assert ("--pod-network bgp refused: this cluster's nodes run another pod network (vxlan on switch-n1)"
            in log)
    assert "Switching a running cluster's pod network is not supported" in log
    # the same mode starts as before
    s = start_server(data, datastore="sqlite", extra=[*LIGHT, "--pod-network", "vxlan"])
    try:
        assert s.proc.poll() is None
    finally:
        assert s.stop() == 0


def test_bgp_flags_without_bgp_mode_are_refused(tmp_path):
    p = subprocess.run([sys.executable, "-m", "nodeagent", "server", "--data-dir", str(tmp_path / "s"),
                        "--pod-network", "vxlan", "--bgp-route-reflectors", "node1"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "need --pod-network bgp (not vxlan)" in p.stderr, p.stderr
    p = subprocess.run([sys.executable, "-m", "nodeagent", "server", "--data-dir", str(tmp_path / "s"),
                        "--pod-network", "bgp", "--bgp-as", "0"], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "--bgp-as 0" in p.stderr, p.stderr
