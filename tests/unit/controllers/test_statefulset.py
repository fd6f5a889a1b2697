"""StatefulSet decisions: ordered create/delete, stable identity, partitioned rolling update."""

from __future__ import annotations

from nodeagent.controllers import statefulset as s


def sts(replicas=3, image="a:1", partition=0, policy="OrderedReady", generation=1):
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "ns", "uid": "su", "generation": generation},
            "spec": {"replicas": replicas, "serviceName": "nginx", "podManagementPolicy": policy,
                     "selector": {"matchLabels": {"app": "w"}},
                     "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}},
                     "template": {"metadata": {"labels": {"app": "w"}},
                                  "spec": {"containers": [{"name": "c", "image": image}]}}}}


def pod(i, rev, ready=True, terminating=False, phase="Running"):
    p = {"metadata": {"name": f"web-{i}", "labels": {s.REVISION_LABEL: rev}}, "spec": {},
         "status": {"phase": phase,
                    "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}
    if terminating:
        p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return p


def test_pod_identity():
    x = sts()
    p = s.pod_for_ordinal(x, 2, s.revision(x))
    assert p["metadata"]["name"] == "web-2" and "generateName" not in p["metadata"]
    assert p["spec"]["hostname"] == "web-2" and p["spec"]["subdomain"] == "nginx"
    assert p["metadata"]["labels"][s.POD_NAME_LABEL] == "web-2"
    assert p["metadata"]["labels"][s.POD_INDEX_LABEL] == "2"
    assert s.ordinal("web", p) == 2 and s.ordinal("web", {"metadata": {"name": "web-x"}}) is None
    assert s.ordinal("web", {"metadata": {"name": "webby-1"}}) is None


def test_ordered_ready_creates_one_at_a_time_in_order():
    x = sts()
    r = s.revision(x)
    assert s.plan(x, []).create == [0]
    assert s.plan(x, [pod(0, r, ready=False)]).create == []  # waits for web-0 to be Ready
    assert s.plan(x, [pod(0, r)]).create == [1]
    assert s.plan(x, [pod(0, r), pod(2, r)]).create == [1]  # a hole is filled first
    p = s.plan(sts(policy="Parallel"), [])
    assert p.create == [0, 1, 2]


def test_scale_down_removes_highest_ordinal_first_one_at_a_time():
    x = sts(replicas=1)
    r = s.revision(x)
    p = s.plan(x, [pod(0, r), pod(1, r), pod(2, r)])
    assert [d["metadata"]["name"] for d in p.delete] == ["web-2"]
    p = s.plan(x, [pod(0, r), pod(1, r), pod(2, r, terminating=True)])
    assert p.delete == []  # wait for web-2 to go
    p = s.plan(sts(replicas=1, policy="Parallel"), [pod(0, r), pod(1, r), pod(2, r)])
    assert sorted(d["metadata"]["name"] for d in p.delete) == ["web-1", "web-2"]


def test_partitioned_rolling_update():
    old = sts(image="a:1")
    r1 = s.revision(old)
    new = sts(image="a:2", partition=1, generation=2)
    new["status"] = {"currentRevision": r1}
    r2 = s.revision(new)
    pods = [pod(0, r1), pod(1, r1), pod(2, r1)]
    p = s.plan(new, pods)
    assert [d["metadata"]["name"] for d in p.delete] == ["web-2"]
    pods[2] = pod(2, r2)
    p = s.plan(new, pods)
    assert [d["metadata"]["name"] for d in p.delete] == ["web-1"]
    pods[1] = pod(1, r2)
    p = s.plan(new, pods)
    assert p.delete == [] and p.create == []  # web-0 is below the partition
    assert p.status["updatedReplicas"] == 2
    assert p.status["currentRevision"] == r1 and p.status["updateRevision"] == r2
    # partition lowered to 0: web-0 follows; then the update revision becomes current
    done = sts(image="a:2", partition=0, generation=3)
    done["status"] = {"currentRevision": r1}
    assert [d["metadata"]["name"] for d in s.plan(done, pods).delete] == ["web-0"]
    st = s.plan(done, [pod(0, r2), pod(1, r2), pod(2, r2)]).status
    assert st["currentRevision"] == r2 and st["currentReplicas"] == 3 and st["readyReplicas"] == 3
    # an unhealthy pod stops the rollout
    assert s.plan(new, [pod(0, r1), pod(1, r1, ready=False), pod(2, r1)]).delete == []


def test_volume_claim_templates_give_each_ordinal_its_claim():
    x = sts()
    x["spec"]["volumeClaimTemplates"] = [{"metadata": {"name": "www"},
                                          "spec": {"accessModes": ["ReadWriteOnce"],
                                                   "resources": {"requests": {"storage": "1Gi"}}}}]
    p = s.pod_for_ordinal(x, 1, "r")
    assert {"name": "www", "persistentVolumeClaim": {"claimName": "www-web-1"}} in p["spec"]["volumes"]
    claims = s.claims_for(x, 1)
    assert [c["metadata"]["name"] for c in claims] == ["www-web-1"]
    assert claims[0]["metadata"]["labels"] == {"app": "w"}
    assert claims[0]["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert "ownerReferences" not in claims[0]["metadata"]  # claims outlive the pods and the set (Retain)
