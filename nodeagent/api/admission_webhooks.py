"""MutatingWebhookConfiguration and ValidatingWebhookConfiguration (admissionregistration.k8s.io/v1): their
defaults and validation as kube-apiserver applies them, and the pure half of deciding whether a webhook is
called for a request (rules, scope, selectors, matchConditions), as kube-apiserver's
`admission/plugin/webhook/generic` decides it. Calling the webhook is the apiserver's business.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from nodeagent.api.schema_cel import RuleError, check_rule, compile_rule, is_bool, to_cel
from nodeagent.api.selectors import SelectorError, from_label_selector
from nodeagent.api.validation import FieldErrors, err, invalid, required

GROUP = "admissionregistration.k8s.io"
MUTATING, VALIDATING = "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"
KINDS = (MUTATING, VALIDATING)
# Never sent to a webhook, so a broken webhook cannot lock a cluster out of fixing it
# (IsExemptAdmissionConfigurationResource).
EXEMPT_RESOURCES = frozenset({"validatingwebhookconfigurations", "mutatingwebhookconfigurations",
                              "validatingadmissionpolicies", "validatingadmissionpolicybindings"})
OPERATIONS = ("*", "CREATE", "UPDATE", "DELETE", "CONNECT")
REVIEW_VERSIONS = ("v1", "v1beta1")
MAX_MATCH_CONDITIONS = 64
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


# ---------------------------------------------------------------- defaults
def default_configuration(obj: dict[str, Any]) -> None:
    """SetDefaults_{Mutating,Validating}Webhook, SetDefaults_Rule, SetDefaults_ServiceReference."""
    mutating = obj.get("kind") == MUTATING
    for hook in obj.get("webhooks") or ():
        if not isinstance(hook, dict):
            continue
        hook.setdefault("failurePolicy", "Fail")
        hook.setdefault("matchPolicy", "Equivalent")
        if hook.get("namespaceSelector") is None:
            hook["namespaceSelector"] = {}
        if hook.get("objectSelector") is None:
            hook["objectSelector"] = {}
        hook.setdefault("timeoutSeconds", 10)
        if mutating:
            hook.setdefault("reinvocationPolicy", "Never")
        service = (hook.get("clientConfig") or {}).get("service")
        if isinstance(service, dict):
            service.setdefault("port", 443)
        for rule in hook.get("rules") or ():
            if isinstance(rule, dict):
                rule.setdefault("scope", "*")


# ---------------------------------------------------------------- validation
def unsupported(field: str, value: Any, supported: tuple[str, ...]) -> dict[str, str]:
    quoted = ", ".join(f'"{s}"' for s in supported)
    return err("FieldValueNotSupported", field, f'Unsupported value: "{value}": supported values: {quoted}')


def validate_configuration(obj: dict[str, Any]) -> FieldErrors:
    """ValidateMutatingWebhookConfiguration / ValidateValidatingWebhookConfiguration (v1 rules)."""
    errs: FieldErrors = []
    mutating = obj.get("kind") == MUTATING
    hooks = obj.get("webhooks") or []
    if not isinstance(hooks, list):
        return [invalid("webhooks", hooks, "must be a list")]
    seen: set[str] = set()
    for i, hook in enumerate(hooks):
        base = f"webhooks[{i}]"
        if not isinstance(hook, dict):
            errs.append(invalid(base, hook, "must be an object"))
            continue
        name = hook.get("name")
        if name in seen:
            errs.append(err("FieldValueDuplicate", f"{base}.name", f'Duplicate value: "{name}"'))
        if isinstance(name, str):
            seen.add(name)
        errs += _webhook(hook, base, mutating)
    return errs


def _webhook(hook: dict[str, Any], base: str, mutating: bool) -> FieldErrors:
    errs: FieldErrors = []
    name = hook.get("name")
    if not name:
        errs.append(required(f"{base}.name"))
    elif not isinstance(name, str) or not _DNS1123_SUBDOMAIN.match(name) or len(name) > 253:
        errs.append(invalid(f"{base}.name", name, "a lowercase RFC 1123 subdomain must consist of lower "
                            "case alphanumeric characters, '-' or '.', and must start and end with an "
                            "alphanumeric character"))
    elif len(name.split(".")) < 3:
        errs.append(invalid(f"{base}.name", name, "should be a domain with at least three segments "
                            "separated by dots"))
    for j, rule in enumerate(hook.get("rules") or ()):
        errs += _rule(rule, f"{base}.rules[{j}]")
    versions = hook.get("admissionReviewVersions")
    if not versions:
        errs.append(required(f"{base}.admissionReviewVersions",
                             "must specify one of " + ", ".join(REVIEW_VERSIONS)))
    elif not any(v in REVIEW_VERSIONS for v in versions):
        errs.append(invalid(f"{base}.admissionReviewVersions", versions,
                            "must include at least one of " + ", ".join(REVIEW_VERSIONS)))
    policy = hook.get("failurePolicy")
    if policy not in ("Fail", "Ignore"):
        errs.append(unsupported(f"{base}.failurePolicy", policy, ("Fail", "Ignore")))
    match_policy = hook.get("matchPolicy")
    if match_policy not in ("Equivalent", "Exact"):
        errs.append(unsupported(f"{base}.matchPolicy", match_policy, ("Equivalent", "Exact")))
    side = hook.get("sideEffects")
    if side is None:
        errs.append(err("FieldValueRequired", f"{base}.sideEffects",
                        'Required value: must specify one of "None", "NoneOnDryRun"'))
    elif side not in ("None", "NoneOnDryRun"):
        errs.append(unsupported(f"{base}.sideEffects", side, ("None", "NoneOnDryRun")))
    timeout = hook.get("timeoutSeconds")
    if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= 30:
        errs.append(invalid(f"{base}.timeoutSeconds", timeout,
                            "the timeout value must be between 1 and 30 seconds"))
    if mutating and hook.get("reinvocationPolicy") not in ("Never", "IfNeeded"):
        errs.append(unsupported(f"{base}.reinvocationPolicy", hook.get("reinvocationPolicy"),
                                 ("Never", "IfNeeded")))
    for field in ("namespaceSelector", "objectSelector"):
        try:
            from_label_selector(hook.get(field))
        except (SelectorError, AttributeError, TypeError) as e:
            errs.append(invalid(f"{base}.{field}", hook.get(field), str(e)))
    errs += _client_config(hook.get("clientConfig"), f"{base}.clientConfig")
    errs += match_conditions_errors(hook.get("matchConditions"), f"{base}.matchConditions")
    return errs


def _rule(rule: Any, base: str) -> FieldErrors:
    if not isinstance(rule, dict):
        return [invalid(base, rule, "must be an object")]
    errs: FieldErrors = []
    ops = rule.get("operations") or []
    if not ops:
        errs.append(required(f"{base}.operations"))
    if len(ops) > 1 and "*" in ops:
        errs.append(invalid(f"{base}.operations", ops,
                            "if '*' is present, must not specify other operations"))
    for k, op in enumerate(ops):
        if op not in OPERATIONS:
            errs.append(unsupported(f"{base}.operations[{k}]", op, OPERATIONS))
    for field in ("apiGroups", "apiVersions"):
        values = rule.get(field) or []
        if not values:
            errs.append(required(f"{base}.{field}"))
        if len(values) > 1 and "*" in values:
            errs.append(invalid(f"{base}.{field}", values, "if '*' is present, must not specify other "
                                + ("API groups" if field == "apiGroups" else "API versions")))
        if field == "apiVersions" and "" in values:
            errs.append(required(f"{base}.apiVersions", "version must not be empty"))
    resources = rule.get("resources") or []
    if not resources:
        errs.append(required(f"{base}.resources"))
    for k, r in enumerate(resources):
        if not isinstance(r, str) or not r:
            errs.append(required(f"{base}.resources[{k}]"))
        elif r.count("/") > 1 or r.startswith("/") or r.endswith("/"):
            errs.append(invalid(f"{base}.resources[{k}]", r, "must be of the form resource or "
                                "resource/subresource"))
    if "*/*" in resources and len(resources) > 1:
        errs.append(invalid(f"{base}.resources", resources, "if '*/*' is present, must not specify other "
                            "resources"))
    if rule.get("scope") not in ("*", "Cluster", "Namespaced"):
        errs.append(unsupported(f"{base}.scope", rule.get("scope"), ("*", "Cluster", "Namespaced")))
    return errs


def _client_config(cc: Any, base: str) -> FieldErrors:
    if not isinstance(cc, dict):
        return [required(base)]
    url, service = cc.get("url"), cc.get("service")
    if (url is None) == (service is None):
        return [required(base, "exactly one of url or service is required")]
    if url is not None:
        return _url(url, f"{base}.url")
    errs: FieldErrors = []
    if not isinstance(service, dict):
        return [invalid(f"{base}.service", service, "must be an object")]
    for field in ("name", "namespace"):
        if not service.get(field):
            errs.append(required(f"{base}.service.{field}", f"service {field} is required"))
    path = service.get("path")
    if path is not None and (not isinstance(path, str) or not path.startswith("/")):
        errs.append(invalid(f"{base}.service.path", path, "must start with a '/'"))
    port = service.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        errs.append(invalid(f"{base}.service.port", port, "port is not valid: must be between 1 and 65535, "
                            "inclusive"))
    return errs


def _url(url: Any, field: str) -> FieldErrors:
    if not isinstance(url, str) or not url:
        return [required(field)]
    parts = urlsplit(url)
    if parts.scheme != "https":
        return [invalid(field, url, "'https' is the only allowed URL scheme")]
    errs: FieldErrors = []
    if not parts.hostname:
        errs.append(invalid(field, url, "host must be specified"))
    if parts.username is not None or parts.password is not None:
        errs.append(invalid(field, url, "user information is not permitted in the URL"))
    if parts.fragment or url.endswith("#"):
        errs.append(invalid(field, url, "fragments are not permitted in the URL"))
    if parts.query or url.endswith("?"):
        errs.append(invalid(field, url, "query parameters are not permitted in the URL"))
    return errs


def match_conditions_errors(conditions: Any, base: str) -> FieldErrors:
    return named_expressions_errors(conditions, base, MAX_MATCH_CONDITIONS)


def named_expressions_errors(items: Any, base: str, most: int | None = None) -> FieldErrors:
    """A list of {name, expression} (matchConditions, a policy's variables): names unique, every
    expression compiling."""
    if items is None:
        return []
    if not isinstance(items, list):
        return [invalid(base, items, "must be a list")]
    errs: FieldErrors = []
    if most is not None and len(items) > most:
        errs.append(err("FieldValueTooMany", base, f"Too many: {len(items)}: must have at most {most} items"))
    names: set[str] = set()
    for i, c in enumerate(items):
        field = f"{base}[{i}]"
        if not isinstance(c, dict):
            errs.append(invalid(field, c, "must be an object"))
            continue
        name = c.get("name")
        if not name:
            errs.append(required(f"{field}.name"))
        elif name in names:
            errs.append(err("FieldValueDuplicate", f"{field}.name", f'Duplicate value: "{name}"'))
        else:
            names.add(name)
        expr = c.get("expression")
        if not isinstance(expr, str) or not expr.strip():
            errs.append(required(f"{field}.expression"))
            continue
        try:
            check_rule(expr)
        except RuleError as e:
            errs.append(invalid(f"{field}.expression", expr, f"compilation failed: {e}"))
    return errs


# ---------------------------------------------------------------- matching
@dataclasses.dataclass(frozen=True)
class Request:
    """What a webhook is matched against: kube-apiserver's admission.Attributes, flattened."""
    operation: str  # CREATE, UPDATE, DELETE, CONNECT
    group: str
    version: str
    resource: str
    subresource: str
    namespace: str  # "" for a cluster-scoped object
    name: str
    obj: Mapping[str, Any] | None
    old: Mapping[str, Any] | None


def rule_matches(rule: Mapping[str, Any], req: Request, version: str | None = None) -> bool:
    """rules.Matcher: operation, group, version (`version` replaces the request's for an equivalent
    match), resource[/subresource] with `*` forms, and scope."""
    ops = rule.get("operations") or ()
    if "*" not in ops and req.operation not in ops:
        return False
    groups = rule.get("apiGroups") or ()
    if "*" not in groups and req.group not in groups:
        return False
    versions = rule.get("apiVersions") or ()
    if "*" not in versions and (version or req.version) not in versions:
        return False
    if not _resource_matches(rule.get("resources") or (), req.resource, req.subresource):
        return False
    scope = rule.get("scope") or "*"
    if scope == "Cluster":
        return req.namespace == ""
    if scope == "Namespaced":
        # a Namespace object is cluster-scoped whatever its name says
        return req.namespace != "" and not (req.group == "" and req.resource == "namespaces")
    return True


def _resource_matches(patterns: Any, resource: str, subresource: str) -> bool:
    for p in patterns:
        if p == "*/*":
            return True
        res, _, sub = p.partition("/")
        if not sub:
            if not subresource and p in ("*", resource):
                return True
            continue
        if res in ("*", resource) and (sub == "*" or sub == subresource):
            return True
    return False


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """An empty or missing selector matches everything (the webhook defaults)."""
    if not selector:
        return True
    return from_label_selector(selector).matches(labels)


def object_selected(hook: Mapping[str, Any], req: Request) -> bool:
    """objectSelector: the new or the old object's labels match."""
    sel = hook.get("objectSelector")
    if not sel:
        return True
    for o in (req.obj, req.old):
        if o is not None and selector_matches(sel, (o.get("metadata") or {}).get("labels") or {}):
            return True
    return False


def namespace_selected(hook: Mapping[str, Any], req: Request,
                       namespace_labels: Mapping[str, str] | None) -> bool:
    """namespaceSelector: a cluster-scoped object (other than a Namespace) always matches; a Namespace is
    matched by its own labels; anything else by its namespace's (`namespace_labels`)."""
    sel = hook.get("namespaceSelector")
    if not sel:
        return True
    if req.group == "" and req.resource == "namespaces":
        o = req.obj if req.obj is not None else req.old
        return selector_matches(sel, ((o or {}).get("metadata") or {}).get("labels") or {})
    if req.namespace == "":
        return True
    return selector_matches(sel, namespace_labels or {})


class MatchConditionError(Exception):
    """A matchCondition that did not evaluate to a boolean."""


def match_conditions_hold(conditions: Any, bindings: Mapping[str, Any]) -> bool:
    """Every matchCondition true: call the webhook; any false: skip it; an error (after a false one has
    been looked for in all) raises MatchConditionError for the failurePolicy to decide."""
    if not conditions:
        return True
    activation = {k: to_cel(v) for k, v in bindings.items()}
    errors: list[str] = []
    for c in conditions:
        try:
            result = compile_rule(c["expression"]).evaluate(activation)
        except Exception as e:  # celpy's evaluation errors come as several types
            errors.append(f"{c.get('name')}: {e}")
            continue
        if isinstance(result, Exception):
            errors.append(f"{c.get('name')}: {result}")
        elif not is_bool(result):
            errors.append(f"{c.get('name')}: must evaluate to bool")
        elif not result:
            return False
    if errors:
        raise MatchConditionError("; ".join(errors))
    return True
