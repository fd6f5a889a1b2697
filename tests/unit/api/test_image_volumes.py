"""volumes[].image (KEP-4639, ImageVolume) as kube-apiserver defaults and validates it."""

from typing import Any

from nodeagent.api import defaults
from nodeagent.api.validation import validate


def _pod(volume: dict[str, Any], mount: dict[str, Any] | None = None) -> dict[str, Any]:
    vm = {"name": "v", "mountPath": "/v", **(mount or {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "busybox:1", "volumeMounts": [vm]}],
                     "volumes": [{"name": "v", **volume}]}}


def _errors(pod: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(e["reason"], e["field"], e["message"]) for e in validate(pod, "Pod", True)]


def test_pull_policy_defaults_as_for_a_container_image():
    for ref, want in (("tools:latest", "Always"), ("tools", "Always"), ("tools:v1", "IfNotPresent"),
                      ("tools@sha256:" + "a" * 64, "IfNotPresent")):
        spec: dict[str, Any] = {"volumes": [{"name": "v", "image": {"reference": ref}}], "containers": []}
        defaults.pod_spec(spec)
        assert spec["volumes"][0]["image"]["pullPolicy"] == want, ref
    spec = {"volumes": [{"name": "v", "image": {"reference": "t:latest", "pullPolicy": "Never"}}]}
    defaults.pod_spec(spec)
    assert spec["volumes"][0]["image"]["pullPolicy"] == "Never"


def test_a_valid_image_volume_passes():
    assert _errors(_pod({"image": {"reference": "tools:v1", "pullPolicy": "IfNotPresent"}},
                        {"subPath": "bin"})) == []


def test_reference_is_required_on_a_pod():
    assert _errors(_pod({"image": {"pullPolicy": "Always"}})) == [
        ("FieldValueRequired", "spec.volumes[0].image.reference", "Required value")]


def test_reference_may_be_left_to_a_template():
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
           "spec": {"selector": {"matchLabels": {"a": "b"}},
                    "template": {"metadata": {"labels": {"a": "b"}}, "spec": _pod({"image": {}})["spec"]}}}
    assert validate(dep, "Deployment", True) == []


def test_unknown_pull_policy_and_sub_path_expr_are_refused():
    assert _errors(_pod({"image": {"reference": "t:v1", "pullPolicy": "Sometimes"}},
                        {"subPathExpr": "$(POD_NAME)"})) == [
        ("FieldValueNotSupported", "spec.volumes[0].image.pullPolicy",
         'Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never"'),
        ("FieldValueInvalid", "spec.containers[0].volumeMounts[0].subPathExpr",
         'Invalid value: "$(POD_NAME)": not allowed in image volume sources')]
