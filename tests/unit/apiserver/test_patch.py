"""Patch formats: JSON merge patch, JSON patch, and strategic merge patch as kubectl sends it."""

from typing import Any

import pytest

from nodeagent.api.patch import PatchError, json_patch, merge_patch, strategic_merge

POD: dict[str, Any] = {
    "metadata": {"name": "p", "labels": {"a": "1", "b": "2"}, "finalizers": ["x"]},
    "spec": {"containers": [{"name": "app", "image": "nginx:1", "ports": [{"containerPort": 80}],
                             "env": [{"name": "A", "value": "1"}]},
                            {"name": "side", "image": "busybox"}],
             "tolerations": [{"key": "t1"}]}}


def test_merge_patch_null_deletes_and_lists_replace():
    out = merge_patch(POD,
                      {"metadata": {"labels": {"a": None, "c": "3"}},
                       "spec": {"tolerations": [{"key": "t2"}]}})
    assert out["metadata"]["labels"] == {"b": "2", "c": "3"}
    assert out["spec"]["tolerations"] == [{"key": "t2"}]
    assert POD["metadata"]["labels"] == {"a": "1", "b": "2"}  # input untouched


def test_json_patch_ops_and_errors():
    out = json_patch(POD, [{"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:2"},
                           {"op": "add", "path": "/metadata/labels/c", "value": "3"},
                           {"op": "remove", "path": "/metadata/labels/a"},
                           {"op": "add", "path": "/spec/tolerations/-", "value": {"key": "t9"}},
                           {"op": "test", "path": "/metadata/name", "value": "p"}])
    assert out["spec"]["containers"][0]["image"] == "nginx:2"
    assert out["metadata"]["labels"] == {"b": "2", "c": "3"}
    assert out["spec"]["tolerations"][-1] == {"key": "t9"}
    with pytest.raises(PatchError):
        json_patch(POD, [{"op": "remove", "path": "/nope"}])
    with pytest.raises(PatchError):
        json_patch(POD, [{"op": "test", "path": "/metadata/name", "value": "q"}])


def test_strategic_merge_containers_by_name_and_ports_by_containerPort():
    patch = {"spec": {"$setElementOrder/containers": [{"name": "side"}, {"name": "app"}],
                      "containers": [{"name": "app", "image": "nginx:2",
                                      "$setElementOrder/ports": [{"containerPort": 80},
                                                                 {"containerPort": 443}],
                                      "ports": [{"containerPort": 443}]}]}}
    out = strategic_merge(POD, patch)
    assert [c["name"] for c in out["spec"]["containers"]] == ["side", "app"]
    app = out["spec"]["containers"][1]
    assert app["image"] == "nginx:2" and app["env"] == [{"name": "A", "value": "1"}]
    assert [p["containerPort"] for p in app["ports"]] == [80, 443]


def test_strategic_merge_directives():
    out = strategic_merge(POD, {"spec": {"containers": [{"name": "side", "$patch": "delete"}]}})
    assert [c["name"] for c in out["spec"]["containers"]] == ["app"]
    out = strategic_merge(POD, {"metadata": {"finalizers": ["y"], "labels": {"$patch": "replace", "z": "9"}}})
    assert out["metadata"]["finalizers"] == ["x", "y"] and out["metadata"]["labels"] == {"z": "9"}
    out = strategic_merge(POD, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}})
    assert out["metadata"]["finalizers"] == []
    out = strategic_merge(POD, {"spec": {"tolerations": [{"key": "new"}]}})  # no merge key: replaced
    assert out["spec"]["tolerations"] == [{"key": "new"}]
    out = strategic_merge({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}},
                          {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}})
    assert out["spec"]["strategy"] == {"type": "Recreate"}


def test_strategic_merge_service_ports_by_port():
    svc = {"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443, "targetPort": 8443}]}}
    out = strategic_merge(svc, {"spec": {"ports": [{"port": 80, "targetPort": 9090}]}})
    assert out["spec"]["ports"] == [{"port": 80, "targetPort": 9090}, {"port": 443, "targetPort": 8443}]


def test_fieldset_ownership_removes_only_what_the_manager_dropped():
    from nodeagent.api.fieldset import apply_ownership, fields_v1, leaves

    first = {"metadata": {"name": "d", "labels": {"a": "1", "b": "2"}},
             "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i",
                                                            "ports": [{"containerPort": 80}]},
                                                           {"name": "side", "image": "s"}]}}}}
    tree = fields_v1(first)
    assert ("f:spec", "f:template", "f:spec", "f:containers", 'k:{"name":"side"}') in leaves(tree)
    live = strategic_merge({}, first)
    apply_ownership(live, first, "m", "apps/v1", "t")
    second = {"metadata": {"name": "d", "labels": {"a": "1"}},
              "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i2"}]}}}}
    live = strategic_merge(live, second)
    apply_ownership(live, second, "m", "apps/v1", "t")
    assert live["metadata"]["labels"] == {"a": "1"}
    cs = live["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in cs] == ["c"] and cs[0]["image"] == "i2" and "ports" not in cs[0]
