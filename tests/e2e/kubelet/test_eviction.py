"""Node-pressure eviction on a real node: a threshold set above what the host has evicts, BestEffort first.

`up --eviction-hard memory.available<99%` keeps memory "under pressure" on any machine: the node reports
MemoryPressure with its taint, and pods are evicted one per pass, ranked as kubelet ranks them (usage
above requests first: the BestEffort pod, admitted because it tolerates the memory-pressure taint, before a
Burstable pod whose request covers its usage).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml

from tests.e2e.kubelet.test_node_up import BUSYBOX, Cluster, _assert_pod_gone, _wait_runtime_empty
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


def _pod(name: str, node: str, requests: dict | None) -> dict:
    c: dict[str, Any] = {"name": "app", "image": BUSYBOX, "imagePullPolicy": "Never",
                         "command": ["sleep", "3600"]}
    if requests:
        c["resources"] = {"requests": requests}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1, "containers": [c]}}


def test_memory_pressure_evicts_the_best_effort_pod_first(tmp_path, images):
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir",
                    str(tmp_path / "images"), "import",
                    "--no-progress", str(images.busybox.docker_archive)], check=True, capture_output=True)
    c = Cluster(tmp_path, unique("nd"), unique("kb"))
    c.extra = ["--eviction-hard", "memory.available<99%", "--housekeeping-interval", "3"]
    rc = 0
    try:
        c.start()
        # Under MemoryPressure the kubelet admits a BestEffort pod only when it tolerates the memory-pressure
        # taint (eviction manager's Admit); this one does, so it runs until the eviction manager ranks it.
        besteffort = _pod("besteffort", c.node, None)
        besteffort["spec"]["tolerations"] = [{"key": "node.kubernetes.io/memory-pressure",
                                              "operator": "Exists", "effect": "NoSchedule"}]
        both = {"apiVersion": "v1", "kind": "List", "items": [_pod("burstable", c.node, {"memory": "1Gi"}),
                                                              besteffort]}
        c.kubectl("apply", "-f", "-", input=yaml.safe_dump(both))

        def failed(name):
            return (c.pod(name).get("status") or {}).get("phase") == "Failed"

        end = time.monotonic() + 60
        while not (failed("besteffort") or failed("burstable")):
            assert time.monotonic() < end, c.tail()
            time.sleep(0.2)
        assert failed("besteffort"), "the Burstable pod went first"
        if failed("burstable"):  # the next pass (3 s later) may have come before this poll saw the first
            def evicted_at(name: str) -> str:
                conds = c.pod(name)["status"]["conditions"]
                return next(x["lastTransitionTime"] for x in conds if x["type"] == "DisruptionTarget")

            assert evicted_at("besteffort") < evicted_at("burstable"), "the Burstable pod went first"
        st = c.pod("besteffort")["status"]
        assert st["reason"] == "Evicted" and "memory" in st["message"]
        assert any(x["type"] == "DisruptionTarget" for x in st["conditions"])
        assert "Evicted" in {e["reason"] for e in c.events("besteffort")}
        node = json.loads(c.kubectl("get", "node", c.node, "-o", "json"))
        pressure = next(x for x in node["status"]["conditions"] if x["type"] == "MemoryPressure")
        assert pressure["status"] == "True"
        assert any(t["key"] == "node.kubernetes.io/memory-pressure" for t in node["spec"].get("taints") or [])
        pod = c.pod("besteffort")
        c.kubectl("delete", "pod", "besteffort", "--wait=true", "--timeout=60s")
        _assert_pod_gone(c, pod)
    finally:
        if c.proc is not None:
            c.kubectl("delete", "pods", "--all", "--wait=true", "--timeout=60s", check=False)
            _wait_runtime_empty(c)
            rc = c.stop()
    assert rc == 0, c.tail()


def test_soft_eviction_waits_for_its_grace_period(tmp_path, images):
    """`--eviction-soft memory.available<99% --eviction-soft-grace-period memory.available=20s`: the node
    reports MemoryPressure at once, but the pod is evicted only once the threshold has held 20 s (it
    cannot be earlier than 20 s after `up` started, whenever the kubelet first saw the pressure); the
    eviction message and event are kubelet's, and the kubelet refuses BestEffort pods while the condition
    holds (a Burstable one is admitted)."""
    import subprocess
    import sys

    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(tmp_path / "images"),
                    "import", "--no-progress", str(images.busybox.docker_archive)], check=True,
                   capture_output=True)
    c = Cluster(tmp_path, unique("nd"), unique("kb"))
    c.extra = ["--eviction-hard", "", "--eviction-soft", "memory.available<99%",
               "--eviction-soft-grace-period", "memory.available=20s", "--eviction-minimum-reclaim",
               "memory.available=10Mi", "--eviction-max-pod-grace-period", "2",
               "--housekeeping-interval", "1"]
    rc = 0
    started = time.monotonic()
    try:
        c.start()
        c.kubectl("apply", "-f", "-", input=yaml.safe_dump(_pod("victim", c.node, {"memory": "1Mi"})))
        end = time.monotonic() + 90
        while (c.pod("victim").get("status") or {}).get("phase") != "Failed":
            assert time.monotonic() < end, c.tail()
            time.sleep(0.3)
        assert time.monotonic() - started >= 20, "evicted before the soft grace period could have passed"
        st = c.pod("victim")["status"]
        assert st["reason"] == "Evicted"
        assert st["message"].startswith("The node was low on resource: memory.")
        assert "Evicted" in {e["reason"] for e in c.events("victim")}
        c.kubectl("apply", "-f", "-", input=yaml.safe_dump(_pod("late", c.node, None)))
        end = time.monotonic() + 60
        while (c.pod("late").get("status") or {}).get("phase") != "Failed":
            assert time.monotonic() < end, c.tail()
            time.sleep(0.3)
        late = c.pod("late")["status"]
        assert late["reason"] == "Evicted"
        assert late["message"] == "Pod was rejected: The node had condition: [MemoryPressure]. "
    finally:
        if c.proc is not None:
            c.kubectl("delete", "pods", "--all", "--wait=true", "--timeout=60s", check=False)
            _wait_runtime_empty(c)
            rc = c.stop()
    assert rc == 0, c.tail()
