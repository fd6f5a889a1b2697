"""ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding (admissionregistration.k8s.io/v1): defaults,
validation, and the pure half of kube-apiserver's `admission/plugin/policy/validating`: which requests a
policy and a binding match, and the decisions of a policy's CEL validations for one request and one param.

CEL is cel-python's, over `object`, `oldObject`, `request`, `params`, `namespaceObject` and `variables`
(every variable evaluated in order; `authorizer` is not offered).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from nodeagent.api.admission_webhooks import (
    Request,
    match_conditions_errors,
    named_expressions_errors,
    namespace_selected,
    object_selected,
    rule_matches,
    unsupported,
)
from nodeagent.api.schema_cel import RuleError, cel_map, check_rule, compile_rule, is_bool, to_cel
from nodeagent.api.validation import FieldErrors, invalid, required

POLICY, BINDING = "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"
ACTIONS = ("Deny", "Warn", "Audit")
REASON_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422, "RequestEntityTooLarge": 413}


# ---------------------------------------------------------------- defaults
def _default_match(match: dict[str, Any]) -> None:
    match.setdefault("matchPolicy", "Equivalent")
    if match.get("namespaceSelector") is None:
        match["namespaceSelector"] = {}
    if match.get("objectSelector") is None:
        match["objectSelector"] = {}
    for rules in ("resourceRules", "excludeResourceRules"):
        for rule in match.get(rules) or ():
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")


def default_policy(obj: dict[str, Any]) -> None:
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("failurePolicy", "Fail")
    if isinstance(spec.get("matchConstraints"), dict):
        _default_match(spec["matchConstraints"])


def default_binding(obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("matchResources"), dict):
        _default_match(spec["matchResources"])


# ---------------------------------------------------------------- validation
def _expression(expr: Any, field: str) -> FieldErrors:
    if not isinstance(expr, str) or not expr.strip():
        return [required(field)]
    try:
        check_rule(expr)
    except RuleError as e:
        return [invalid(field, expr, f"compilation failed: {e}")]
    return []


def validate_policy(obj: dict[str, Any]) -> FieldErrors:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    errs: FieldErrors = []
    if spec.get("failurePolicy") not in ("Fail", "Ignore"):
        errs.append(unsupported("spec.failurePolicy", spec.get("failurePolicy"), ("Fail", "Ignore")))
    match = spec.get("matchConstraints")
    if not isinstance(match, dict) or not match.get("resourceRules"):
        errs.append(required("spec.matchConstraints.resourceRules"))
    validations, audits = spec.get("validations") or [], spec.get("auditAnnotations") or []
    if not validations and not audits:
        errs.append(required("spec.validations", "validations or auditAnnotations must contain at least one "
                             "item"))
    for i, v in enumerate(validations):
        base = f"spec.validations[{i}]"
        if not isinstance(v, dict):
            errs.append(invalid(base, v, "must be an object"))
            continue
        errs += _expression(v.get("expression"), f"{base}.expression")
        if v.get("messageExpression") is not None:
            errs += _expression(v.get("messageExpression"), f"{base}.messageExpression")
        if v.get("reason") is not None and v["reason"] not in REASON_CODES:
            errs.append(unsupported(f"{base}.reason", v["reason"], tuple(REASON_CODES)))
    errs += named_expressions_errors(spec.get("variables"), "spec.variables")
    errs += match_conditions_errors(spec.get("matchConditions"), "spec.matchConditions")
    pk = spec.get("paramKind")
    if pk is not None and (not isinstance(pk, dict) or not pk.get("apiVersion") or not pk.get("kind")):
        errs.append(required("spec.paramKind", "apiVersion and kind are required"))
    return errs


def validate_binding(obj: dict[str, Any]) -> FieldErrors:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    errs: FieldErrors = []
    if not spec.get("policyName"):
        errs.append(required("spec.policyName"))
    actions = spec.get("validationActions") or []
    if not actions:
        errs.append(required("spec.validationActions"))
    for i, a in enumerate(actions):
        if a not in ACTIONS:
            errs.append(unsupported(f"spec.validationActions[{i}]", a, ACTIONS))
    if "Deny" in actions and "Warn" in actions:
        errs.append(invalid("spec.validationActions", actions, "must not contain both Deny and Warn "
                            "(repeating the same validation failure information in the API response and "
                            "headers serves no purpose)"))
    ref = spec.get("paramRef")
    if ref is not None:
        if not isinstance(ref, dict):
            errs.append(invalid("spec.paramRef", ref, "must be an object"))
        else:
            if bool(ref.get("name")) == (ref.get("selector") is not None):
                errs.append(required("spec.paramRef", "one of name or selector must be specified"))
            if ref.get("parameterNotFoundAction") not in ("Allow", "Deny"):
                errs.append(unsupported("spec.paramRef.parameterNotFoundAction",
                                         ref.get("parameterNotFoundAction"), ("Allow", "Deny")))
    return errs


# ---------------------------------------------------------------- matching
def _rules_match(rules: Any, req: Request, version_alternatives: tuple[str, ...]) -> bool:
    for rule in rules or ():
        if not isinstance(rule, dict):
            continue
        names = rule.get("resourceNames") or ()
        if names and req.name not in names:
            continue
        if rule_matches(rule, req) or any(rule_matches(rule, req, v) for v in version_alternatives):
            return True
    return False


def resources_match(match: Mapping[str, Any] | None, req: Request, namespace_labels: Mapping[str, str] | None,
                    other_versions: tuple[str, ...] = ()) -> bool:
    """MatchResources: selectors, a resource rule (other served versions under matchPolicy Equivalent),
    and no exclude rule. A binding without matchResources matches whatever its policy does."""
    if match is None:
        return True
    alternatives = other_versions if match.get("matchPolicy", "Equivalent") == "Equivalent" else ()
    if not namespace_selected(match, req, namespace_labels) or not object_selected(match, req):
        return False
    if match.get("resourceRules") is not None and not _rules_match(match["resourceRules"], req, alternatives):
        return False
    return not _rules_match(match.get("excludeResourceRules"), req, alternatives)


# ---------------------------------------------------------------- evaluation
@dataclasses.dataclass(frozen=True)
class Decision:
    """A failed validation: its message and Status reason; `error` for an evaluation error (decided by the
    policy's failurePolicy)."""
    message: str
    reason: str = "Invalid"
    error: bool = False


def evaluate(spec: Mapping[str, Any], bindings: dict[str, Any]) -> list[Decision]:
    """The policy's variables, matchConditions and validations for one request and param; `bindings` holds
    object, oldObject, request, params and namespaceObject as JSON values. A matchCondition false: []."""
    activation: dict[str, Any] = {k: to_cel(v) for k, v in bindings.items()}
    variables: dict[str, Any] = {}
    activation["variables"] = cel_map({})
    for var in spec.get("variables") or ():
        try:
            variables[var["name"]] = compile_rule(var["expression"]).evaluate(activation)
        except Exception as e:  # kept as the error; an expression using it fails with it
            variables[var["name"]] = e
        activation["variables"] = cel_map({k: v for k, v in variables.items()
                                           if not isinstance(v, Exception)})
    result: Any
    for cond in spec.get("matchConditions") or ():
        try:
            result = compile_rule(cond["expression"]).evaluate(activation)
        except Exception as e:
            result = e
        if isinstance(result, Exception):
            why = f"failed to evaluate match condition '{cond.get('name')}': {result}"
            return [Decision(why, error=True)]
        if not result:
            return []
    out: list[Decision] = []
    for v in spec.get("validations") or ():
        expr = v["expression"]
        try:
            result = compile_rule(expr).evaluate(activation)
        except Exception as e:
            result = e
        if isinstance(result, Exception) or not is_bool(result):
            failure = str(result) if isinstance(result, Exception) else "must evaluate to bool"
            out.append(Decision(f"expression '{expr}' resulted in error: {failure}", error=True))
            continue
        if result:
            continue
        message = v.get("message") or f"failed expression: {expr.strip()}"
        if v.get("messageExpression"):
            try:
                m = compile_rule(v["messageExpression"]).evaluate(activation)
                if isinstance(m, str) and m.strip() and "\n" not in m:
                    message = str(m)
            except Exception:
                pass  # kube falls back to the static message
        out.append(Decision(message, str(v.get("reason") or "Invalid")))
    return out
