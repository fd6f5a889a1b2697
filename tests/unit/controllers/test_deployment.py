import pytest

from nodeagent.controllers import deployment as d


def dep(replicas=10, surge="25%", unavailable="25%", strategy="RollingUpdate", image="v1"):
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "uid": "du", "generation": 2,
                         "annotations": {d.CHANGE_CAUSE: "kubectl set image"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "strategy": {"type": strategy, "rollingUpdate": {"maxSurge": surge,
                                                                      "maxUnavailable": unavailable}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": image}]}}}}


def rs(name, replicas, available, created, revision=1, image="v1"):
    return {"metadata": {"name": name, "creationTimestamp": created,
                         "annotations": {d.REVISION: str(revision)}},
            "spec": {"replicas": replicas,
                     "template": {"metadata": {"labels": {"app": "web", d.HASH_LABEL: "h"}},
                                  "spec": {"containers": [{"name": "c", "image": image}]}}},
            "status": {"replicas": replicas, "availableReplicas": available}}


def test_hash_is_stable_safe_and_ignores_its_own_label():
    t = dep()["spec"]["template"]
    h = d.template_hash(t)
    assert h == d.template_hash(t)
    assert set(h) <= set(d._ALPHANUMS)
    labelled = {"metadata": {"labels": {"app": "web", d.HASH_LABEL: h}}, "spec": t["spec"]}
    assert d.template_hash(labelled) == h
    assert d.template_hash(t, collision_count=1) != h
    assert d.template_hash(dep(image="v2")["spec"]["template"]) != h


@pytest.mark.parametrize("replicas,surge,unav,expected", [
    (10, "25%", "25%", (3, 2)), (1, "25%", "25%", (1, 0)), (4, 0, 0, (0, 1)), (10, 2, "10%", (2, 1)),
])
def test_fenceposts_round_like_kubernetes(replicas, surge, unav, expected):
    assert d.fenceposts(dep(replicas, surge, unav)) == expected


def test_rolling_update_first_steps():
    deployment = dep(10, "25%", "25%", image="v2")
    old = rs("web-old", 10, 10, "2026-01-01T00:00:00Z")
    assert d.find_new_rs(deployment, [old]) is None
    # surge 3: the new RS may start with 3 pods while the old keeps 10
    assert d.new_rs_replicas(deployment, [old], None) == 3
    new = rs("web-new", 3, 0, "2026-01-02T00:00:00Z", revision=2, image="v2")
    # new pods not yet available: only maxUnavailable (2) old pods may go
    assert d.scale_down_old(deployment, new, [old]) == {"web-old": 8}
    # once the 3 new pods are available, more old ones can go (13 total, min available 8)
    new["status"]["availableReplicas"] = 3
    old2 = rs("web-old", 8, 8, "2026-01-01T00:00:00Z")
    assert d.scale_down_old(deployment, new, [old2]) == {"web-old": 5}


def test_unhealthy_old_replicas_go_first():
    deployment = dep(4, 1, 1, image="v2")
    old = rs("old", 4, 2, "2026-01-01T00:00:00Z")  # 2 unavailable
    new = rs("new", 1, 0, "2026-01-02T00:00:00Z", image="v2")
    # all=5, minAvailable=3, newUnavailable=1 → maxScaledDown=1: one unhealthy old pod removed
    assert d.scale_down_old(deployment, new, [old]) == {"old": 3}


def test_recreate_scales_straight_to_desired():
    assert d.new_rs_replicas(dep(5, strategy="Recreate"), [], None) == 5


def test_new_rs_object_carries_hash_revision_and_owner():
    deployment = dep(4)
    old = [rs("a", 0, 0, "2026-01-01T00:00:00Z", revision=3)]
    obj = d.new_rs_object(deployment, old, 1)
    h = d.template_hash(deployment["spec"]["template"])
    assert obj["metadata"]["name"] == f"web-{h}"
    assert obj["spec"]["selector"]["matchLabels"][d.HASH_LABEL] == h
    assert obj["spec"]["template"]["metadata"]["labels"][d.HASH_LABEL] == h
    assert obj["metadata"]["annotations"][d.REVISION] == "4"
    assert obj["metadata"]["annotations"][d.CHANGE_CAUSE] == "kubectl set image"
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "du"
    assert "pod-template-hash" not in deployment["spec"]["template"]["metadata"]["labels"]
    assert d.find_new_rs(deployment, [obj]) is obj


def test_history_limit_deletes_oldest_empty():
    deployment = dep()
    deployment["spec"]["revisionHistoryLimit"] = 1
    olds = [rs(f"r{i}", 0, 0, f"2026-01-0{i}T00:00:00Z", revision=i) for i in range(1, 4)]
    olds[0]["status"]["replicas"] = 0
    assert [r["metadata"]["name"] for r in d.history_to_delete(deployment, olds)] == ["r1", "r2"]


def test_status_and_completion():
    deployment = dep(3)
    new = rs("new", 3, 3, "x")
    new["status"]["readyReplicas"] = 3
    st = d.status(deployment, new, [new])
    assert st["updatedReplicas"] == 3 and st["unavailableReplicas"] == 0
    assert d.is_complete(deployment, st)
    old = rs("old", 1, 1, "y")
    assert not d.is_complete(deployment, d.status(deployment, new, [new, old]))


def test_null_and_empty_fields_compare_like_go():
    t = dep()["spec"]["template"]
    from_kubectl = {"metadata": {"creationTimestamp": None, "labels": {"app": "web", d.HASH_LABEL: "x"}},
                    "spec": {**t["spec"], "volumes": []}}
    assert d.templates_equal(t, from_kubectl)
    assert d.template_hash(t) == d.template_hash(from_kubectl)


def test_new_rs_annotations_copy_the_deployment_but_not_its_bookkeeping():
    deployment = dep(4)
    deployment["metadata"]["annotations"].update({d.REVISION: "7", d.LAST_APPLIED: "{}", "team": "a"})
    obj = d.new_rs_object(deployment, [], 1)
    assert obj["metadata"]["annotations"] == {
        d.CHANGE_CAUSE: "kubectl set image", "team": "a", d.REVISION: "1",
        d.DESIRED_REPLICAS: "4", d.MAX_REPLICAS: "5"}


def test_rollback_makes_an_old_rs_newest_and_keeps_its_history():
    ann = {d.REVISION: "1", d.DESIRED_REPLICAS: "4", d.MAX_REPLICAS: "5"}
    assert d.set_new_rs_annotations(dep(4), ann, 3, exists=True)
    assert ann[d.REVISION] == "3" and ann[d.REVISION_HISTORY] == "1"
    assert d.set_new_rs_annotations(dep(4), ann, 5, exists=True)
    assert ann[d.REVISION] == "5" and ann[d.REVISION_HISTORY] == "1,3"
    # never downwards, and nothing to change the second time
    assert not d.set_new_rs_annotations(dep(4), ann, 4, exists=True)
    assert ann[d.REVISION] == "5"
    # a revision that is not a number is left as it is
    bad = {d.REVISION: "x"}
    assert not d.set_new_rs_annotations({"metadata": {}}, bad, 2, exists=True) and bad[d.REVISION] == "x"


def test_revision_history_is_bounded_oldest_first():
    ann = {d.REVISION: "9999", d.REVISION_HISTORY: ",".join(str(1000 + i) for i in range(400))}
    d.set_new_rs_annotations({"metadata": {}}, ann, 10000, exists=True)
    hist = ann[d.REVISION_HISTORY]
    assert len(hist) <= d.MAX_REV_HISTORY_CHARS and hist.endswith(",9999") and not hist.startswith("1000,")
