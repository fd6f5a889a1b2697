"""ValidatingAdmissionPolicy through the registry: CEL validations with message, messageExpression and
reason, variables, params by name and by selector, Deny/Warn actions, matchConstraints and the binding's
matchResources, failurePolicy on evaluation errors and missing params, and the objects' own validation."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.api.resources import builtin
from nodeagent.apiserver.auth import User
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.registry import Registry
from nodeagent.apiserver.webhooks import REQUEST, RequestScope
from nodeagent.store.memory import MemoryStore

NS, CMS = builtin("", "v1", "namespaces"), builtin("", "v1", "configmaps")
DEPLOY = builtin("apps", "v1", "deployments")
VAP = builtin("admissionregistration.k8s.io", "v1", "validatingadmissionpolicies")
VAPB = builtin("admissionregistration.k8s.io", "v1", "validatingadmissionpolicybindings")


@pytest.fixture
async def reg():
    r = Registry(MemoryStore())
    r.enable_webhooks()
    await r.create(NS, None, {"metadata": {"name": "prod", "labels": {"env": "prod"}}})
    await r.create(NS, None, {"metadata": {"name": "dev"}})
    REQUEST.set(RequestScope(User("alice", ("system:authenticated",))))
    yield r
    await r.close()


def deployment(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {"metadata": {"name": name}, "spec": {
        "replicas": replicas, "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}}


DEPLOY_RULES = {"resourceRules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["apps"],
                                   "apiVersions": ["v1"], "resources": ["deployments"]}]}


async def policy(reg: Registry, name: str, spec: dict[str, Any], binding: dict[str, Any]) -> None:
    await reg.create(VAP, None, {"metadata": {"name": name}, "spec": spec})
    await reg.create(VAPB, None, {"metadata": {"name": f"{name}-binding"},
                                  "spec": {"policyName": name, **binding}})


async def test_deny_with_the_failed_expression_and_kubes_message(reg):
    await policy(reg, "max-replicas", {"matchConstraints": DEPLOY_RULES, "validations": [
        {"expression": "object.spec.replicas <= 5"}]}, {"validationActions": ["Deny"]})
    await reg.create(DEPLOY, "dev", deployment("small", 3))
    with pytest.raises(ApiError) as e:
        await reg.create(DEPLOY, "dev", deployment("big", 9))
    assert e.value.code == 422 and e.value.reason == "Invalid"
    assert e.value.message == ('deployments.apps "big" is forbidden: ValidatingAdmissionPolicy '
                               "'max-replicas' with binding 'max-replicas-binding' denied request: "
                               "failed expression: object.spec.replicas <= 5")
    with pytest.raises(ApiError):
        await reg.get(DEPLOY, "dev", "big")
    await reg.create(CMS, "dev", {"metadata": {"name": "not-matched"}})


async def test_message_expression_reason_variables_and_warn(reg):
    await policy(reg, "named", {
        "matchConstraints": DEPLOY_RULES,
        "variables": [{"name": "prefix", "expression": "'team-'"}],
        "validations": [{"expression": "object.metadata.name.startsWith(variables.prefix)",
                         "messageExpression": "'name ' + object.metadata.name + ' must start with ' + "
                                              "variables.prefix", "reason": "Forbidden"}]},
        {"validationActions": ["Warn"]})
    scope = RequestScope(User("bob"))
    REQUEST.set(scope)
    await reg.create(DEPLOY, "dev", deployment("web", 1))
    assert scope.warnings == ["Validation failed for ValidatingAdmissionPolicy 'named' with binding "
                              "'named-binding': name web must start with team-"]
    b = await reg.get(VAPB, None, "named-binding")
    b["spec"]["validationActions"] = ["Deny"]
    await reg.update(VAPB, None, "named-binding", b)
    with pytest.raises(ApiError) as e:
        await reg.create(DEPLOY, "dev", deployment("api", 1))
    assert e.value.code == 403 and e.value.reason == "Forbidden"
    assert e.value.message.endswith("denied request: name api must start with team-")


async def test_params_by_name_and_namespace_selector_of_the_binding(reg):
    await reg.create(CMS, "prod", {"metadata": {"name": "limits"}, "data": {"max": "2"}})
    await policy(reg, "limits", {
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}, "matchConstraints": DEPLOY_RULES,
        "validations": [{"expression": "object.spec.replicas <= int(params.data.max)",
                         "message": "too many replicas for this namespace"}]},
        {"validationActions": ["Deny"], "paramRef": {"name": "limits", "parameterNotFoundAction": "Deny"},
         "matchResources": {"namespaceSelector": {"matchLabels": {"env": "prod"}}}})
    with pytest.raises(ApiError) as e:
        await reg.create(DEPLOY, "prod", deployment("big", 3))
    assert e.value.message.endswith("denied request: too many replicas for this namespace")
    await reg.create(DEPLOY, "prod", deployment("ok", 2))
    await reg.create(DEPLOY, "dev", deployment("big", 3))  # the binding selects prod only


async def test_missing_params_follow_parameter_not_found_action(reg):
    await policy(reg, "p", {"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                            "matchConstraints": DEPLOY_RULES,
                            "validations": [{"expression": "false"}]},
                 {"validationActions": ["Deny"], "paramRef": {
                     "selector": {"matchLabels": {"kind": "limits"}}, "parameterNotFoundAction": "Allow"}})
    await reg.create(DEPLOY, "dev", deployment("a", 1))  # no params: nothing to check
    b = await reg.get(VAPB, None, "p-binding")
    b["spec"]["paramRef"]["parameterNotFoundAction"] = "Deny"
    await reg.update(VAPB, None, "p-binding", b)
    with pytest.raises(ApiError) as e:
        await reg.create(DEPLOY, "dev", deployment("b", 1))
    assert "failed to configure binding: no params found for policy binding with `Deny` " \
        "parameterNotFoundAction" in e.value.message


async def test_evaluation_errors_follow_failure_policy(reg):
    await policy(reg, "broken", {"matchConstraints": DEPLOY_RULES, "failurePolicy": "Fail",
                                 "validations": [{"expression": "object.spec.nothing.here == 1"}]},
                 {"validationActions": ["Deny"]})
    with pytest.raises(ApiError) as e:
        await reg.create(DEPLOY, "dev", deployment("a", 1))
    assert "expression 'object.spec.nothing.here == 1' resulted in error" in e.value.message
    p = await reg.get(VAP, None, "broken")
    p["spec"]["failurePolicy"] = "Ignore"
    await reg.update(VAP, None, "broken", p)
    await reg.create(DEPLOY, "dev", deployment("a", 1))


async def test_exclude_rules_and_match_conditions(reg):
    rules = {**DEPLOY_RULES, "excludeResourceRules": [{"operations": ["*"], "apiGroups": ["apps"],
                                                       "apiVersions": ["*"], "resources": ["deployments"],
                                                       "resourceNames": ["exempt"]}]}
    await policy(reg, "no", {"matchConstraints": rules, "validations": [{"expression": "false"}],
                             "matchConditions": [{"name": "not-bob",
                                                  "expression": "request.userInfo.username != 'bob'"}]},
                 {"validationActions": ["Deny"]})
    await reg.create(DEPLOY, "dev", deployment("exempt", 1))
    with pytest.raises(ApiError):
        await reg.create(DEPLOY, "dev", deployment("other", 1))
    REQUEST.set(RequestScope(User("bob")))
    await reg.create(DEPLOY, "dev", deployment("other", 1))


async def test_policies_and_bindings_are_validated(reg):
    with pytest.raises(ApiError) as e:
        await reg.create(VAP, None, {"metadata": {"name": "bad"}, "spec": {
            "validations": [{"expression": "1 +", "reason": "Teapot"}]}})
    fields = {c["field"]: c["message"] for c in (e.value.details or {})["causes"]}
    assert "compilation failed" in fields["spec.validations[0].expression"]
    assert fields["spec.validations[0].reason"].startswith('Unsupported value: "Teapot"')
    assert fields["spec.matchConstraints.resourceRules"].startswith("Required value")
    with pytest.raises(ApiError) as e:
        await reg.create(VAPB, None, {"metadata": {"name": "bad"},
                                      "spec": {"validationActions": ["Deny", "Warn"]}})
    fields = {c["field"]: c["message"] for c in (e.value.details or {})["causes"]}
    assert "spec.policyName" in fields
    assert "must not contain both Deny and Warn" in fields["spec.validationActions"]
