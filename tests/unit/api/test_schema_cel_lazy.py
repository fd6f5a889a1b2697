"""CEL loaded when a rule is first compiled, not at start (issue 26 item 4), with validation unchanged: a CRD
whose rule does not compile is still refused when written, a good rule still validates objects, and the
CRDs the server ships install without loading CEL."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from nodeagent.api import schema_cel
from nodeagent.api import schema_validation as sv
from nodeagent.apiserver import crds


def _fresh(code: str) -> str:
    """Run `code` in a new interpreter (this one may have CEL loaded by other tests); its stdout."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          check=True, timeout=120).stdout.strip()


def test_the_apiserver_and_admission_modules_import_without_cel():
    out = _fresh("""
        import sys
        import nodeagent.apiserver.service, nodeagent.api.admission_policy, nodeagent.api.admission_webhooks
        import nodeagent.api.schema_validation
        print(sorted(m for m in ("celpy", "lark") if m in sys.modules))
    """)
    assert out == "[]"


def test_installing_the_shipped_crds_loads_no_cel_and_serves_their_rules():
    out = _fresh("""
        import asyncio, sys
        from nodeagent.apiserver import crds
        from nodeagent.apiserver.registry import Registry
        from nodeagent.store.memory import MemoryStore

        async def main():
            reg = Registry(MemoryStore())
            made = await crds.install_bundled(reg)
            print(len(made), sorted(m for m in ("celpy", "lark") if m in sys.modules))

        asyncio.run(main())
    """)
    assert out == f"{sum(len(v) for v in crds.BUNDLES.values())} []"


def _rules(node: Any) -> list[str]:
    out: list[str] = []
    if isinstance(node, dict):
        for r in node.get("x-kubernetes-validations") or ():
            out += [r[k] for k in ("rule", "messageExpression") if isinstance(r.get(k), str)]
        for v in node.values():
            out += _rules(v)
    elif isinstance(node, list):
        for v in node:
            out += _rules(v)
    return out


@pytest.mark.parametrize("path", sorted(crds.BUNDLES), ids=lambda p: p.name)
def test_every_rule_of_the_shipped_crds_compiles(path):
    """What `shipped_rules` stands on: without it these CRDs would be checked the same way."""
    docs = crds._load(path)
    rules = _rules(docs)
    assert rules, "the bundle has CEL rules"
    for rule in rules:
        schema_cel.check_rule(rule)
    assert all(sv.crd_schema_errors(d) == [] for d in docs)


BAD: dict[str, Any] = {"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {
    "type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-validations": [
        {"rule": "self.a >"}]}}}}}]}}


def test_a_bad_rule_still_refuses_the_crd_and_checking_keeps_no_program():
    schema_cel.compile_rule.cache_clear()
    (e,) = sv.crd_schema_errors(BAD)
    assert e["field"] == ("spec.versions[0].schema.openAPIV3Schema.properties[spec]"
                          ".x-kubernetes-validations[0].rule")
    assert e["message"].startswith('Invalid value: "self.a >": compilation failed: ')
    good = {"spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {
        "type": "object", "x-kubernetes-validations": [{"rule": "self.x > 1"}]}}}]}}
    assert sv.crd_schema_errors(good) == []
    assert schema_cel.compile_rule.cache_info().currsize == 0  # compiled for use on the first object


def test_a_good_rule_compiles_on_first_use_and_is_kept():
    schema_cel.compile_rule.cache_clear()
    schema = {"type": "object", "x-kubernetes-validations": [{"rule": "self.x > 1", "message": "x > 1"}]}
    assert schema_cel.validate({"x": 2}, schema) == []
    (e,) = schema_cel.validate({"x": 0}, schema)
    assert e["message"] == 'Invalid value: "object": x > 1'
    assert schema_cel.compile_rule.cache_info().currsize == 1


def test_under_shipped_rules_a_rule_is_not_compiled_but_refuses_objects_with_kubes_words():
    """apiextensions-apiserver's validator says `rule compile error` for a rule that does not compile when an
    object is validated (one admitted before CEL changed); ours too, never a rule silently skipped."""
    with schema_cel.shipped_rules():
        assert sv.crd_schema_errors(BAD) == []
    (e,) = sv.crd_schema_errors(BAD)  # outside it, checked again
    assert "compilation failed" in e["message"]
    schema = BAD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    (e,) = schema_cel.validate({"spec": {"a": 1}}, schema)
    assert e["field"] == "spec"
    assert e["reason"] == "FieldValueInvalid"
    assert e["message"].startswith('Invalid value: "object": rule compile error: ')
