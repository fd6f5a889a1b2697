"""Structural-schema pruning, defaulting and validation, with kube-apiserver's wording of each failure."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.api import schema_validation as sv

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"spec": {"type": "object", "required": ["size"], "properties": {
        "size": {"type": "integer", "minimum": 1, "maximum": 10},
        "ratio": {"type": "number", "exclusiveMaximum": True, "maximum": 1.5, "multipleOf": 0.5},
        "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
        "name": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2, "maxLength": 4},
        "port": {"x-kubernetes-int-or-string": True},
        "note": {"type": "string", "nullable": True},
        "count": {"type": "integer", "default": 3},
        "tags": {"type": "array", "minItems": 1, "maxItems": 2, "x-kubernetes-list-type": "set",
                 "items": {"type": "string"}},
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "properties": {"name": {"type": "string"},
                                                             "n": {"type": "integer", "default": 1}}}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
        "inner": {"type": "object", "properties": {"deep": {"type": "object",
                                                            "properties": {"x": {"type": "integer"}},
                                                            "default": {}}},
                  "default": {}},
        "embedded": {"type": "object", "x-kubernetes-embedded-resource": True,
                     "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}}},
    }}},
}


def causes(spec: dict[str, Any]) -> dict[str, tuple[str, str]]:
    obj = {"apiVersion": "g/v1", "kind": "W", "metadata": {"name": "w"}, "spec": spec}
    return {e["field"]: (e["reason"], e["message"]) for e in sv.admit(obj, SCHEMA)}


@pytest.mark.parametrize("spec, field, reason, message", [
    ({}, "spec.size", "FieldValueRequired", "Required value"),
    ({"size": 0}, "spec.size", "FieldValueInvalid",
     "Invalid value: 0: spec.size in body should be greater than or equal to 1"),
    ({"size": 11}, "spec.size", "FieldValueInvalid",
     "Invalid value: 11: spec.size in body should be less than or equal to 10"),
    ({"size": "3"}, "spec.size", "FieldValueTypeInvalid",
     'Invalid value: "string": spec.size in body must be of type integer: "string"'),
    ({"size": 2.5}, "spec.size", "FieldValueTypeInvalid",
     'Invalid value: "number": spec.size in body must be of type integer: "number"'),
    ({"size": 1, "ratio": 1.5}, "spec.ratio", "FieldValueInvalid",
     "Invalid value: 1.5: spec.ratio in body should be less than 1.5"),
    ({"size": 1, "ratio": 0.7}, "spec.ratio", "FieldValueInvalid",
     "Invalid value: 0.7: spec.ratio in body should be a multiple of 0.5"),
    ({"size": 1, "color": "green"}, "spec.color", "FieldValueNotSupported",
     'Unsupported value: "green": supported values: "red", "blue"'),
    ({"size": 1, "name": "AB"}, "spec.name", "FieldValueInvalid",
     "Invalid value: \"AB\": spec.name in body should match '^[a-z]+$'"),
    ({"size": 1, "name": "a"}, "spec.name", "FieldValueInvalid",
     'Invalid value: "a": spec.name in body should be at least 2 chars long'),
    ({"size": 1, "name": "abcde"}, "spec.name", "FieldValueTooLong",
     "Too long: may not be more than 4 bytes"),
    ({"size": 1, "port": True}, "spec.port", "FieldValueTypeInvalid",
     'Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean"'),
    ({"size": 1, "tags": []}, "spec.tags", "FieldValueInvalid",
     "Invalid value: 0: spec.tags in body should have at least 1 items"),
    ({"size": 1, "tags": ["a", "b", "c"]}, "spec.tags", "FieldValueTooMany",
     "Too many: 3: must have at most 2 items"),
    ({"size": 1, "tags": ["a", "a"]}, "spec.tags[1]", "FieldValueDuplicate", 'Duplicate value: "a"'),
    ({"size": 1, "ports": [{"name": "x"}, {"name": "x"}]}, "spec.ports[1]", "FieldValueDuplicate",
     'Duplicate value: map["name":"x"]'),
    ({"size": 1, "labels": {"a": 1}}, "spec.labels.a", "FieldValueTypeInvalid",
     'Invalid value: "integer": spec.labels.a in body must be of type string: "integer"'),
    ({"size": 1, "tags": [None]}, "spec.tags[0]", "FieldValueTypeInvalid",
     'Invalid value: "null": spec.tags[0] in body must be of type string: "null"'),
    ({"size": 1, "embedded": {"spec": {}}}, "spec.embedded.kind", "FieldValueRequired",
     "Required value: must not be empty"),
])
def test_each_failure_worded_as_kube_apiserver(spec, field, reason, message):
    assert causes(spec)[field] == (reason, message)


def test_a_valid_object_has_no_causes():
    assert causes({"size": 5, "ratio": 1.0, "port": "http", "note": None, "tags": ["a"],
                   "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}}) == {}


def test_pruning_reports_paths_and_keeps_what_the_schema_allows():
    obj: dict[str, Any] = {"apiVersion": "g/v1", "kind": "W", "metadata": {"name": "w", "labels": {"a": "b"}},
                           "status": {"x": 1},
           "spec": {"size": 1, "bogus": 1, "labels": {"any": "x"}, "free": {"deep": {"z": 1}},
                    "ports": [{"name": "a", "extra": 2}],
                    "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                 "spec": {"a": "x", "b": "y"}, "other": 1}}}
    pruned = sv.prune(obj, SCHEMA)
    assert pruned == ["status", "spec.bogus", "spec.ports[0].extra", "spec.embedded.spec.b",
                      "spec.embedded.other"]
    assert obj["metadata"] == {"name": "w", "labels": {"a": "b"}}
    assert obj["spec"]["free"] == {"deep": {"z": 1}} and obj["spec"]["labels"] == {"any": "x"}
    assert obj["spec"]["embedded"] == {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                       "spec": {"a": "x"}}


def test_defaults_fill_absent_and_non_nullable_null_fields_recursively():
    spec: dict[str, Any] = {"size": 1, "count": None, "note": None, "ports": [{"name": "a"}]}
    sv.apply_defaults({"spec": spec}, SCHEMA)
    assert spec["color"] == "red" and spec["count"] == 3 and spec["note"] is None
    assert spec["inner"] == {"deep": {}} and spec["ports"] == [{"name": "a", "n": 1}]
    spec["inner"]["deep"]["x"] = 1
    other: dict[str, Any] = {"spec": {"size": 1}}
    sv.apply_defaults(other, SCHEMA)
    assert other["spec"]["inner"] == {"deep": {}}  # defaults are copied, never shared


def test_a_crd_schema_must_be_structural_with_valid_patterns_and_defaults():
    crd = {"spec": {"versions": [
        {"name": "v1", "schema": {"openAPIV3Schema": SCHEMA}},
        {"name": "v2", "schema": {"openAPIV3Schema": {"properties": {
            "spec": {"properties": {"a": {"description": "no type"},
                                    "b": {"type": "array"},
                                    "c": {"type": "string", "pattern": "(unclosed"},
                                    "d": {"type": "string", "enum": ["x"], "default": "y"}},
                     "type": "object"}}}}}]}}
    got = {e["field"]: e["message"] for e in sv.crd_schema_errors(crd)}
    root = "spec.versions[1].schema.openAPIV3Schema"
    assert got == {
        f"{root}.type": "Required value: must not be empty at the root",
        f"{root}.properties[spec].properties[a].type": "Required value: must not be empty for specified "
                                                        "object fields",
        f"{root}.properties[spec].properties[b].items": "Required value: must be specified",
        f"{root}.properties[spec].properties[c].pattern": 'Invalid value: "(unclosed": must be a valid '
                                                           'regular expression',
        f"{root}.properties[spec].properties[d].default": 'Unsupported value: "y": supported values: "x"',
    }


CEL_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"spec": {
    "type": "object",
    "x-kubernetes-validations": [
        {"rule": "self.min <= self.max", "message": "min must not exceed max"},
        {"rule": "self.max < 100", "fieldPath": ".max", "reason": "FieldValueForbidden"},
        {"rule": "self.mode == oldSelf.mode", "message": "mode is immutable"},
        {"rule": "self.max != 42", "messageExpression": "'max may not be ' + string(self.max)"}],
    "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}, "mode": {"type": "string"},
                   "names": {"type": "array", "items": {"type": "string",
                                                        "x-kubernetes-validations": [
                                                            {"rule": "self.startsWith('n-')"}]}}}}}}


def test_validation_rules_worded_as_kube_apiserver():
    def run(spec: dict[str, Any], old: dict[str, Any] | None = None) -> list[tuple[str, str, str]]:
        obj: dict[str, Any] = {"apiVersion": "g/v1", "kind": "W", "metadata": {"name": "w"}, "spec": spec}
        before = {"spec": old} if old is not None else None
        return [(e["field"], e["reason"], e["message"]) for e in sv.admit(obj, CEL_SCHEMA, before)]

    assert run({"min": 1, "max": 2, "mode": "a", "names": ["n-x"]}) == []
    assert run({"min": 3, "max": 2, "mode": "a"}) == [
        ("spec", "FieldValueInvalid", 'Invalid value: "object": min must not exceed max')]
    assert run({"min": 1, "max": 200, "mode": "a"}) == [
        ("spec.max", "FieldValueForbidden", "Forbidden: failed rule: self.max < 100")]
    assert run({"min": 1, "max": 42, "mode": "a"}) == [
        ("spec", "FieldValueInvalid", 'Invalid value: "object": max may not be 42')]
    assert run({"min": 1, "max": 2, "mode": "b"}, old={"min": 1, "max": 2, "mode": "a"}) == [
        ("spec", "FieldValueInvalid", 'Invalid value: "object": mode is immutable')]
    assert run({"min": 1, "max": 2, "mode": "a", "names": ["ok", "n-1"]}) == [
        ("spec.names[0]", "FieldValueInvalid",
         "Invalid value: \"string\": failed rule: self.startsWith('n-')")]
    assert run({"max": 2, "mode": "a"}) == [
        ("spec", "FieldValueInvalid", 'Invalid value: "object": no such key: min')]


def test_a_rule_that_does_not_compile_refuses_the_crd():
    crd = {"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {
        "type": "object", "x-kubernetes-validations": [{"rule": "self.a >"}]}}}]}}
    (e,) = sv.crd_schema_errors(crd)
    assert e["field"] == "spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].rule"
    assert e["message"].startswith('Invalid value: "self.a >": compilation failed: ')


def test_metadata_described_as_a_bare_object_is_not_pruned():
    """Most CRDs (the Gateway API's among them) say `metadata: {type: object}`: ObjectMeta stays whole."""
    schema = {"type": "object", "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                                               "metadata": {"type": "object"}, "spec": {"type": "object"}}}
    obj: dict[str, Any] = {"apiVersion": "g/v1", "kind": "W", "metadata": {"name": "w", "labels": {"a": "b"}},
                           "spec": {}}
    assert sv.prune(obj, schema) == []
    assert obj["metadata"] == {"name": "w", "labels": {"a": "b"}}


def test_rules_see_reserved_and_punctuated_property_names_escaped():
    """As apiserver/pkg/cel/escaping.go: `namespace` is `__namespace__`, `a-b` is `a__dash__b`; map keys
    are not escaped (external-snapshotter's VolumeSnapshotContent rule uses `self.__namespace__`)."""
    from nodeagent.api import schema_cel

    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "ref": {"type": "object", "properties": {"name": {"type": "string"},
                                                     "namespace": {"type": "string"},
                                                     "a-b": {"type": "string"}},
                    "x-kubernetes-validations": [
                        {"rule": "has(self.name) && has(self.__namespace__)", "message": "both"},
                        {"rule": "!has(self.a__dash__b) || self.a__dash__b == 'x'", "message": "dash"}]},
            "labels": {"type": "object", "additionalProperties": {"type": "string"},
                       "x-kubernetes-validations": [{"rule": "!('a-b' in self) || self['a-b'] == 'y'",
                                                     "message": "map"}]}}}
    assert schema_cel.validate({"ref": {"name": "n", "namespace": "ns", "a-b": "x"}, "labels": {"a-b": "y"}},
                               schema) == []
    errs = schema_cel.validate({"ref": {"name": "n", "a-b": "z"}, "labels": {"a-b": "q"}}, schema)
    assert sorted(e["message"].rsplit(": ", 1)[-1] for e in errs) == ["both", "dash", "map"]
