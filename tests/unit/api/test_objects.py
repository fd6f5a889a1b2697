"""copy_object: an exact, independent deep copy of a JSON object, whatever it holds."""

from typing import Any

from nodeagent.api.objects import copy_object


def test_copy_is_deep_and_equal():
    pod: dict[str, Any] = {"metadata": {"name": "a", "labels": {"x": "1"}},
                           "spec": {"containers": [{"name": "c"}]},
                           "n": 1.5, "none": None, "ok": True, "text": "ünï"}
    c = copy_object(pod)
    assert c == pod
    c["metadata"]["labels"]["x"] = "2"
    c["spec"]["containers"].append({})
    assert pod["metadata"]["labels"] == {"x": "1"} and len(pod["spec"]["containers"]) == 1


def test_what_json_cannot_hold_is_still_copied():
    odd: dict[Any, Any] = {1: "int key", "big": 2 ** 70, "nested": {"x": [1]}}
    c = copy_object(odd)
    assert c == odd and c["nested"] is not odd["nested"]
