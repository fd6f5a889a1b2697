"""Node allocatable on a real node: `up --system-reserved memory=100Mi --eviction-hard memory.available<200Mi`
publishes status.allocatable.memory = capacity − 100Mi − 200Mi, as the kubelet does."""

from __future__ import annotations

import json
import time

import pytest

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
