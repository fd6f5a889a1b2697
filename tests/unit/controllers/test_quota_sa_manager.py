"""ResourceQuota recount, the default ServiceAccount rule, and the --controllers selection."""

from __future__ import annotations

import pytest

from nodeagent.controllers import manager, quota
from nodeagent.controllers.serviceaccount_controller import needs_default


def pod(cpu="100m", mem="64Mi", phase="Running", deleting=False):
    p = {"metadata": {"name": "p"}, "status": {"phase": phase},
         "spec": {"containers": [{"resources": {"requests": {"cpu": cpu, "memory": mem},
                                                "limits": {"memory": mem}}}]}}
    if deleting:
        p["metadata"]["deletionTimestamp"] = "x"
    return p


def test_hard_keys_map_to_resources():
    for key, name, group in (("pods", "pods", ""), ("requests.cpu", "pods", ""), ("memory", "pods", ""),
                             ("services.nodeports", "services", ""), ("configmaps", "configmaps", ""),
                             ("count/deployments.apps", "deployments", "apps"),
                             ("count/jobs.batch", "jobs", "batch")):
        r = quota.resource_for_key(key)
        assert r and (r.name, r.group) == (name, group), key
    assert quota.resource_for_key("count/nothing.example.com") is None


def test_usage_counts_live_pods_and_objects():
    hard = {"pods": "10", "requests.cpu": "2", "limits.memory": "1Gi", "configmaps": "5",
            "count/deployments.apps": "3"}
    objs = {"pods.": [pod(), pod("250m", "128Mi"), pod(phase="Succeeded"), pod(deleting=True)],
            "configmaps.": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}],
            "deployments.apps": []}
    used = quota.usage(hard, objs)
    assert used == {"pods": "2", "requests.cpu": "350m", "limits.memory": str(192 * 2**20), "configmaps": "2",
                    "count/deployments.apps": "0"}


def test_default_service_account_needed_only_in_active_namespaces():
    active = {"metadata": {"name": "a"}, "status": {"phase": "Active"}}
    assert needs_default(active, None)
    assert not needs_default(active, {"metadata": {"name": "default"}})
    assert not needs_default({"metadata": {"name": "a", "deletionTimestamp": "x"},
                              "status": {"phase": "Terminating"}},
                             None)


def test_controller_selection():
    names = [c.name for c in manager.select("*")]
    assert names == [c.name for c in manager.CONTROLLERS]
    assert "nodelifecycle" in names and "statefulset" in names
    assert manager.select("none") == () and manager.select("") == ()
    assert [c.name for c in manager.select("*,-podgc")] == [n for n in names if n != "podgc"]
    assert [c.name for c in manager.select("job,cronjob")] == ["job", "cronjob"]
    with pytest.raises(ValueError):
        manager.select("nosuch")
