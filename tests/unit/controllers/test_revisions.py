"""ControllerRevision history decisions."""

from __future__ import annotations

from nodeagent.controllers import revisions as r


def owner(image="a:1", limit=2):
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "ds", "namespace": "ns", "uid": "u",
                         "annotations": {r.CHANGE_CAUSE: "kubectl set image"}},
            "spec": {"revisionHistoryLimit": limit,
                     "template": {"metadata": {"labels": {"app": "x"}},
                                  "spec": {"containers": [{"name": "c", "image": image}]}}}}


def cr(name, number, hash_value=None):
    return {"metadata": {"name": name, "labels": {r.HASH_LABEL: hash_value or name}}, "revision": number}


def test_first_revision_is_created_with_replace_patch_and_selector_labels():
    p = r.plan(owner(), "ds-h1", "h1", [], set())
    assert p.number == 1 and p.renumber is None and p.delete == []
    obj = p.create
    assert obj is not None
    assert obj["metadata"]["name"] == "ds-h1" and obj["revision"] == 1
    assert obj["metadata"]["labels"] == {"app": "x", r.HASH_LABEL: "h1"}
    assert obj["data"]["spec"]["template"]["$patch"] == "replace"
    assert obj["data"]["spec"]["template"]["spec"]["containers"][0]["image"] == "a:1"
    assert obj["metadata"]["annotations"] == {r.CHANGE_CAUSE: "kubectl set image"}
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "u"


def test_existing_revision_kept_old_one_renumbered_on_rollback():
    revs = [cr("ds-h1", 1, "h1"), cr("ds-h2", 2, "h2")]
    p = r.plan(owner(), "ds-h2", "h2", revs, {"h2"})
    assert p.create is None and p.renumber is None and p.number == 2
    p = r.plan(owner(), "ds-h1", "h1", revs, {"h2"})  # undo to the first template
    assert p.create is None and p.renumber and p.renumber[0]["metadata"]["name"] == "ds-h1" and p.number == 3


def test_history_limit_spares_revisions_pods_still_use():
    revs = [cr(f"ds-h{i}", i, f"h{i}") for i in range(1, 6)]
    p = r.plan(owner(limit=2), "ds-h5", "h5", revs, {"h5", "h1"})
    assert [x["metadata"]["name"] for x in p.delete] == ["ds-h2"]
    p = r.plan(owner(limit=2), "ds-h5", "h5", revs, {"h5"})
    assert [x["metadata"]["name"] for x in p.delete] == ["ds-h1", "ds-h2"]
