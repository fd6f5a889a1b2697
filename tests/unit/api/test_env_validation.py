"""A container's env and envFrom as kube-apiserver 1.32 validates them (TestValidateEnv,
TestValidateEnvFrom in pkg/apis/core/validation), with RelaxedEnvironmentVariableValidation on, as it is by
default in 1.32."""

from typing import Any

import pytest

from nodeagent.api import defaults
from nodeagent.api.validation import validate

ENV_PATHS = ('"metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", '
             '"spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs"')

DIVISOR = "valueFrom.resourceFieldRef.divisor"


def _pod(env: list[Any] | None = None, env_from: list[Any] | None = None,
         field: str = "containers") -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "busybox:1"}
    if env is not None:
        c["env"] = env
    if env_from is not None:
        c["envFrom"] = env_from
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox:1"}]}
    spec[field] = [c]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": spec}
    defaults.pod(pod)
    return pod


def _errors(pod: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["field"], e["message"]) for e in validate(pod, "Pod", True)]


def _field_ref(path: str, api_version: str | None = "v1") -> dict[str, Any]:
    ref = {"fieldPath": path}
    if api_version is not None:
        ref["apiVersion"] = api_version
    return {"fieldRef": ref}


def test_valid_env_passes_with_relaxed_names():
    env = [
        {"name": "abc", "value": "value"},
        {"name": "ABC", "value": "value"},
        {"name": "AbC_123", "value": "value"},
        {"name": "abc", "value": ""},
        {"name": "a.b.c", "value": "value"},
        {"name": "a-b-c", "value": "value"},
        {"name": "1abc", "value": "value"},  # relaxed: a digit first is fine
        {"name": "Logging:LogLevel:Default", "value": "Debug"},  # KEP-4369's story
        {"name": "with space~!", "value": "x"},
        {"name": "abc", "valueFrom": _field_ref("metadata.annotations['key']")},
        {"name": "abc", "valueFrom": _field_ref("metadata.labels['key']")},
        {"name": "abc", "valueFrom": _field_ref("metadata.name")},
        {"name": "abc", "valueFrom": _field_ref("status.podIPs")},
        {"name": "abc", "valueFrom": _field_ref("spec.host")},  # converted to spec.nodeName
        {"name": "abc", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "abc", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
        {"name": "abc", "valueFrom": {"resourceFieldRef": {"resource": "limits.hugepages-2Mi"}}},
        {"name": "abc", "valueFrom": {"configMapKeyRef": {"name": "some-config-map", "key": "some-key"}}},
        {"name": "abc", "valueFrom": {"secretKeyRef": {"name": "some-secret", "key": "some.key"}}},
    ]
    assert _errors(_pod(env)) == []


@pytest.mark.parametrize("name", ["", "a=b", "tab\there", "ünïcode"])
def test_env_names_outside_printable_ascii_or_with_equals_are_refused(name):
    got = _errors(_pod([{"name": name, "value": "x"}]))
    if not name:
        assert got == [("spec.containers[0].env[0].name", "Required value")]
    else:
        assert got == [("spec.containers[0].env[0].name", f'Invalid value: "{name}": a valid environment '
                        "variable name must consist only of printable ASCII characters other than '='")]


@pytest.mark.parametrize("value_from, field, message", [
    ({"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"},
      "secretKeyRef": {"name": "a-secret", "key": "a-key"}},
     "valueFrom", 'Invalid value: "": may not have more than one field specified at a time'),
    ({}, "valueFrom", 'Invalid value: "": must specify one of: `fieldRef`, `resourceFieldRef`, '
                      "`configMapKeyRef` or `secretKeyRef`"),
    ({"fieldRef": {"apiVersion": "v1"}}, "valueFrom.fieldRef.fieldPath", "Required value"),
    ({"fieldRef": {"apiVersion": "v2", "fieldPath": "metadata.name"}}, "valueFrom.fieldRef.fieldPath",
     'Invalid value: "metadata.name": error converting fieldPath: unsupported pod version: v2'),
    ({"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.whoops"}}, "valueFrom.fieldRef.fieldPath",
     'Invalid value: "metadata.whoops": error converting fieldPath: field label not supported: '
     "metadata.whoops"),
    ({"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name['x']"}}, "valueFrom.fieldRef.fieldPath",
     "Invalid value: \"metadata.name['x']\": error converting fieldPath: field label does not support "
     "subscript: metadata.name['x']"),
    ({"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.labels"}}, "valueFrom.fieldRef.fieldPath",
     f'Unsupported value: "metadata.labels": supported values: {ENV_PATHS}'),
    ({"fieldRef": {"apiVersion": "v1", "fieldPath": "status.phase"}}, "valueFrom.fieldRef.fieldPath",
     f'Unsupported value: "status.phase": supported values: {ENV_PATHS}'),
    ({"resourceFieldRef": {"resource": "limits.cpu", "divisor": "2m"}}, DIVISOR,
     'Invalid value: "2m": only divisor\'s values 1m and 1 are supported with the cpu resource'),
    ({"resourceFieldRef": {"resource": "limits.memory", "divisor": "2Mi"}}, DIVISOR,
     'Invalid value: "2Mi": only divisor\'s values 1, 1k, 1M, 1G, 1T, 1P, 1E, 1Ki, 1Mi, 1Gi, 1Ti, 1Pi, 1Ei '
     "are supported with the memory resource"),
    ({"resourceFieldRef": {"resource": "limits.gpu"}}, "valueFrom.resourceFieldRef.resource",
     'Unsupported value: "limits.gpu": supported values: "limits.cpu", "limits.ephemeral-storage", '
     '"limits.memory", "requests.cpu", "requests.ephemeral-storage", "requests.memory"'),
    ({"configMapKeyRef": {"name": "cm", "key": ""}}, "valueFrom.configMapKeyRef.key", "Required value"),
    ({"secretKeyRef": {"name": "s", "key": "a/b"}}, "valueFrom.secretKeyRef.key",
     "Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
     "(e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"),
    ({"secretKeyRef": {"name": "s", "key": ".."}}, "valueFrom.secretKeyRef.key",
     "Invalid value: \"..\": must not be '..'"),
])
def test_invalid_value_from_is_refused_as_kube_apiserver_words_it(value_from, field, message):
    assert _errors(_pod([{"name": "X", "valueFrom": value_from}])) == [
        (f"spec.containers[0].env[0].{field}", message)]


def test_value_and_value_from_together_are_refused():
    env = [{"name": "X", "value": "v", "valueFrom": _field_ref("metadata.name")}]
    assert _errors(_pod(env)) == [("spec.containers[0].env[0].valueFrom",
                                   'Invalid value: "": may not be specified when `value` is not empty')]


def test_an_invalid_annotation_key_in_a_subscript_is_refused():
    got = _errors(_pod([{"name": "X", "valueFrom": _field_ref("metadata.annotations['invalid~key']")}]))
    assert [f for f, _ in got] == ["spec.containers[0].env[0].valueFrom.fieldRef"]
    assert got[0][1].startswith('Invalid value: "invalid~key": name part must consist of alphanumeric')


def test_field_ref_api_version_defaults_to_v1_as_kube_apiserver_does():
    pod = _pod([{"name": "X", "valueFrom": _field_ref("metadata.name", api_version=None)}])
    assert pod["spec"]["containers"][0]["env"][0]["valueFrom"]["fieldRef"]["apiVersion"] == "v1"
    assert _errors(pod) == []


def test_env_from_rules():
    ok = [{"configMapRef": {"name": "cm"}}, {"prefix": "1:weird prefix", "secretRef": {"name": "s"}}]
    assert _errors(_pod(env_from=ok)) == []
    assert _errors(_pod(env_from=[{"prefix": "a=b", "configMapRef": {"name": "cm"}}])) == [
        ("spec.containers[0].envFrom[0].prefix", 'Invalid value: "a=b": a valid environment variable name '
         "must consist only of printable ASCII characters other than '='")]
    assert _errors(_pod(env_from=[{"configMapRef": {"name": "cm"}, "secretRef": {"name": "s"}}])) == [
        ("spec.containers[0].envFrom",
         'Invalid value: "": may not have more than one field specified at a time')]
    assert _errors(_pod(env_from=[{"prefix": "P_"}])) == [
        ("spec.containers[0].envFrom",
         'Invalid value: "": must specify one of: `configMapRef` or `secretRef`')]
    assert _errors(_pod(env_from=[{"configMapRef": {}}])) == [
        ("spec.containers[0].envFrom[0].configMapRef.name", "Required value")]
    got = _errors(_pod(env_from=[{"secretRef": {"name": "Bad_Name"}}]))
    assert [f for f, _ in got] == ["spec.containers[0].envFrom[0].secretRef.name"]


def test_init_containers_and_templates_are_checked_too():
    assert [f for f, _ in _errors(_pod([{"name": "a=b", "value": "x"}], field="initContainers"))] == [
        "spec.initContainers[0].env[0].name"]
    pod = _pod()
    dep: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "Deployment",
                           "metadata": {"name": "d", "namespace": "default"},
                           "spec": {"selector": {"matchLabels": {"a": "b"}},
                                    "template": {"metadata": {"labels": {"a": "b"}}, "spec": pod["spec"]}}}
    dep["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "X", "valueFrom": {}}]
    assert [e["field"] for e in validate(dep, "Deployment", True)] == [
        "spec.template.spec.containers[0].env[0].valueFrom"]
