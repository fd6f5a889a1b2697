"""Node allocatable on a real node: `up --system-reserved memory=100Mi --eviction-hard memory.available<200Mi`
publishes status.allocatable.memory = capacity − 100Mi − 200Mi, as the kubelet does; the same from a
KubeletConfiguration file, with the kubepods cgroup limited to capacity − 100Mi."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from nodeagent.api.quantity import parse_quantity
from tests.e2e.kubelet.test_node_up import Cluster
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


def test_allocatable_memory_reflects_system_reserved_and_hard_eviction(tmp_path):
    c = Cluster(tmp_path, unique("nd"), unique("kb"))
    c.extra = ["--system-reserved", "memory=100Mi,cpu=100m", "--eviction-hard", "memory.available<200Mi"]
    rc = 0
    try:
        c.start()
        end = time.monotonic() + 60
        while True:
            out = c.kubectl("get", "node", c.node, "-o", "json", check=False)
            status = (json.loads(out) if out.strip().startswith("{") else {}).get("status") or {}
            if "allocatable" in status:
                break
            assert time.monotonic() < end, c.tail()
            time.sleep(0.5)
        cap, alloc = status["capacity"], status["allocatable"]
        Mi = 2**20
        assert parse_quantity(alloc["memory"]) == parse_quantity(cap["memory"]) - 300 * Mi
        assert parse_quantity(alloc["cpu"]) == parse_quantity(cap["cpu"]) - parse_quantity("100m")
    finally:
        if c.proc is not None:
            rc = c.stop()
    assert rc == 0, c.tail()


def test_config_file_with_flags_over_it_and_kubepods_limited_to_allocatable(tmp_path):
    """`up --config kubelet.yaml --max-pods 30`: the file's systemReserved, evictionHard and
    enforceNodeAllocatable reach the Node and the kubepods cgroup; the flag beats the file's maxPods."""
    conf = tmp_path / "kubelet.yaml"
    conf.write_text(yaml.safe_dump({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "systemReserved": {"memory": "100Mi"}, "evictionHard": {"memory.available": "200Mi"},
        "enforceNodeAllocatable": ["pods"], "maxPods": 50}))
    c = Cluster(tmp_path, unique("nd"), unique("kb"))
    c.extra = ["--config", str(conf), "--max-pods", "30"]
    rc = 0
    try:
        c.start()
        end = time.monotonic() + 60
        while True:
            out = c.kubectl("get", "node", c.node, "-o", "json", check=False)
            status = (json.loads(out) if out.strip().startswith("{") else {}).get("status") or {}
            if "allocatable" in status:
                break
            assert time.monotonic() < end, c.tail()
            time.sleep(0.5)
        cap, alloc = status["capacity"], status["allocatable"]
        Mi = 2**20
        assert parse_quantity(alloc["memory"]) == parse_quantity(cap["memory"]) - 300 * Mi
        assert cap["pods"] == "30" and alloc["pods"] == "30"
        from kernel.cgroups import detect_cgroups

        info = detect_cgroups()
        if info.version == "v1":
            limit = int(Path(info.v1_controllers["memory"], c.cgroup_root().strip("/"), "kubepods",
                             "memory.limit_in_bytes").read_text())
            want = int(parse_quantity(cap["memory"])) - 100 * Mi  # the eviction threshold is not taken off
            assert want - 4096 < limit <= want, (limit, want)
    finally:
        if c.proc is not None:
            rc = c.stop()
    assert rc == 0, c.tail()
