"""Admission webhooks, as kube-apiserver's MutatingAdmissionWebhook and ValidatingAdmissionWebhook plugins
run them: the configurations (by name, their webhooks in order) are matched against the request
(`api.admission_webhooks`), mutating webhooks are called one after another and their JSONPatch applied (those
with `reinvocationPolicy: IfNeeded` called once more when a later one changed the object), validating
webhooks all at once, the first refusal winning. A webhook that cannot be called, answers garbage or times
out fails the request (`failurePolicy: Fail`, 500 `Internal error occurred: failed calling webhook …`) or is
skipped (`Ignore`); a refusal is the webhook's Status, `admission webhook "<name>" denied the request: …`.

The requesting user and the warnings webhooks return travel with the request in `REQUEST` (set by the HTTP
boundary): the registry, which calls `mutate` and `validate`, never sees the HTTP request.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextvars
import copy
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from nodeagent.api import admission_policy as ap
from nodeagent.api import admission_webhooks as aw
from nodeagent.api.patch import PatchError, json_patch
from nodeagent.api.resources import Resource, all_resources, builtin, by_kind
from nodeagent.api.selectors import SelectorError, from_label_selector
from nodeagent.apiserver.auth import User
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.metrics import Metrics
from nodeagent.apiserver.webhook_client import CallFailed, WebhookClient

log = logging.getLogger("nodeagent.apiserver.webhooks")

MUTATING_CONFIGS = builtin(aw.GROUP, "v1", "mutatingwebhookconfigurations")
VALIDATING_CONFIGS = builtin(aw.GROUP, "v1", "validatingwebhookconfigurations")
POLICIES = builtin(aw.GROUP, "v1", "validatingadmissionpolicies")
POLICY_BINDINGS = builtin(aw.GROUP, "v1", "validatingadmissionpolicybindings")
NAMESPACES = builtin("", "v1", "namespaces")
Lookup = Callable[[Resource, "str | None"], Awaitable[list[dict[str, Any]]]]
LOOPBACK_USER = User("system:apiserver", ("system:authenticated", "system:masters"))


@dataclasses.dataclass
class RequestScope:
    """One API request as admission sees it: who asked, and the warnings to send back."""
    user: User
    warnings: list[str] = dataclasses.field(default_factory=list)


REQUEST: contextvars.ContextVar[RequestScope | None] = contextvars.ContextVar("nodeagent_admission_request",
                                                                              default=None)


@dataclasses.dataclass
class Attributes:
    """admission.Attributes: the operation on one object."""
    res: Resource
    operation: str  # CREATE, UPDATE, DELETE
    namespace: str
    name: str
    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    subresource: str = ""
    dry_run: bool = False
    options: dict[str, Any] | None = None

    def request(self, version: str | None = None) -> aw.Request:
        return aw.Request(self.operation, self.res.group, version or self.res.version, self.res.name,
                          self.subresource, self.namespace, self.name, self.obj, self.old)


class CallError(Exception):
    """The webhook was not called successfully: its failurePolicy decides."""

    def __init__(self, hook: str, reason: str) -> None:
        super().__init__(f'failed calling webhook "{hook}": {reason}')


def denied(hook: str, result: Mapping[str, Any] | None) -> ApiError:
    """webhookerrors.ToStatusErr: the webhook's own Status (code at least 400), its message prefixed."""
    result = dict(result or {})
    code = result.get("code") if isinstance(result.get("code"), int) else 0
    prefix = f'admission webhook "{hook}" denied the request'
    if result.get("message"):
        message = f"{prefix}: {result['message']}"
    elif result.get("reason"):
        message = f"{prefix}: {result['reason']}"
    else:
        message = f"{prefix} without explanation"
    details = result.get("details") if isinstance(result.get("details"), dict) else None
    return ApiError(max(code or 0, 400), str(result.get("reason") or ""), message, details)


def internal_error(message: str) -> ApiError:
    """apierrors.NewInternalError: the message also as the one cause."""
    return ApiError(500, "InternalError", f"Internal error occurred: {message}",
                    {"causes": [{"message": message}]})


class WebhookAdmission:
    """The two webhook admission plugins over the watch cache's configurations."""

    def __init__(self, lookup: Lookup, client: WebhookClient | None = None,
                 metrics: Metrics | None = None) -> None:
        self._lookup = lookup
        self.client = client or WebhookClient(lookup)
        self.metrics = metrics

    def _observe(self, hook: Mapping[str, Any], kind: str, attrs: Attributes, started: float,
                 error: BaseException | None) -> None:
        if self.metrics is None:
            return
        error_type, code = None, 200
        if isinstance(error, CallError):
            error_type, code = "calling_webhook_error", 500
        elif isinstance(error, ApiError):
            error_type, code = "no_error", error.code
        failed_open = isinstance(error, CallError) and hook.get("failurePolicy") == "Ignore"
        self.metrics.observe_webhook(str(hook.get("name")), kind, attrs.operation, time.monotonic() - started,
                                     error_type, code, failed_open)

    async def close(self) -> None:
        await self.client.close()

    # ------------------------------------------------------------------ mutating
    async def mutating_configured(self) -> bool:
        """Whether any MutatingWebhookConfiguration exists (with none, a write need not keep a copy of its
        object to compare with what the webhooks return)."""
        return bool(await self._lookup(MUTATING_CONFIGS, None))

    async def mutate(self, attrs: Attributes) -> dict[str, Any] | None:
        """Run the mutating webhooks; the (possibly patched) object."""
        if attrs.res.group == aw.GROUP and attrs.res.name in aw.EXEMPT_RESOURCES:
            return attrs.obj
        hooks = await self._hooks(MUTATING_CONFIGS)
        if not hooks:
            return attrs.obj
        reinvocable: list[tuple[str, dict[str, Any]]] = []
        reinvoke = False
        for config, hook in hooks:
            if not await self._should_call(hook, attrs):
                continue
            changed = await self._mutate_once(hook, attrs)
            if changed and reinvocable:
                reinvoke = True
            if hook.get("reinvocationPolicy") == "IfNeeded":
                reinvocable.append((config, hook))
        if reinvoke:  # a later webhook changed what an IfNeeded one had seen: each is called once more
            for _, hook in reinvocable:
                await self._mutate_once(hook, attrs)
        return attrs.obj

    async def _mutate_once(self, hook: dict[str, Any], attrs: Attributes) -> bool:
        started = time.monotonic()
        try:
            response = await self._call(hook, attrs, mutating=True)
        except (CallError, ApiError) as e:
            self._observe(hook, "admit", attrs, started, e)
            if isinstance(e, ApiError):
                raise
            if hook.get("failurePolicy") == "Ignore":
                log.warning("Failed calling webhook, failing open %s: %s", hook.get("name"), e)
                return False
            log.warning("Failed calling webhook, failing closed %s: %s", hook.get("name"), e)
            raise internal_error(str(e)) from None
        self._observe(hook, "admit", attrs, started, None)
        patch = response.get("patch")
        if not patch:
            return False
        name = str(hook.get("name"))
        try:
            ops = json.loads(base64.b64decode(patch, validate=True))
        except (binascii.Error, ValueError, TypeError) as e:
            return self._fail_open_or_raise(hook, CallError(
                name, f"received undecodable patch in webhook response: {e}"))
        if response.get("patchType") != "JSONPatch":
            return self._fail_open_or_raise(hook, CallError(
                name, f'unsupported patch type "{response.get("patchType")}"'))
        if not ops:
            return False
        if attrs.obj is None:
            raise internal_error(f'admission webhook "{name}" attempted to modify the object, which is not '
                                 "supported for this operation")
        try:
            patched = json_patch(attrs.obj, ops)
        except PatchError as e:
            raise internal_error(str(e)) from None
        if not isinstance(patched, dict):
            raise internal_error(f'admission webhook "{name}" patched the object into a non-object')
        if patched == attrs.obj:
            return False
        attrs.obj = patched
        return True

    @staticmethod
    def _fail_open_or_raise(hook: Mapping[str, Any], e: CallError) -> bool:
        if hook.get("failurePolicy") == "Ignore":
            log.warning("Failed calling webhook, failing open %s: %s", hook.get("name"), e)
            return False
        raise internal_error(str(e))

    # ------------------------------------------------------------------ validating
    async def validate(self, attrs: Attributes) -> None:
        """Run the matching validating webhooks at once; the first refusal (in configuration order)."""
        if attrs.res.group == aw.GROUP and attrs.res.name in aw.EXEMPT_RESOURCES:
            return
        await self._policies(attrs)
        hooks = await self._hooks(VALIDATING_CONFIGS)
        called = [hook for _, hook in hooks if await self._should_call(hook, attrs)]
        if not called:
            return
        results = await asyncio.gather(*(self._validate_one(h, attrs) for h in called))
        for refusal in results:
            if refusal is not None:
                raise refusal

    async def _validate_one(self, hook: dict[str, Any], attrs: Attributes) -> ApiError | None:
        started = time.monotonic()
        try:
            await self._call(hook, attrs, mutating=False)
        except CallError as e:
            self._observe(hook, "validating", attrs, started, e)
            if hook.get("failurePolicy") == "Ignore":
                log.warning("Failed calling webhook, failing open %s: %s", hook.get("name"), e)
                return None
            log.warning("Failed calling webhook, failing closed %s: %s", hook.get("name"), e)
            return internal_error(str(e))
        except ApiError as e:
            self._observe(hook, "validating", attrs, started, e)
            return e
        self._observe(hook, "validating", attrs, started, None)
        return None

    # ------------------------------------------------------------------ policies
    async def _policies(self, attrs: Attributes) -> None:
        """ValidatingAdmissionPolicy: every bound policy whose constraints and binding match, once per param;
        a failed validation denies (Deny), warns (Warn) or is only counted (Audit: there is no audit log);
        the first denial is the answer, `<resource> "<name>" is forbidden: ValidatingAdmissionPolicy …`."""
        bindings = sorted(await self._lookup(POLICY_BINDINGS, None), key=lambda b: b["metadata"]["name"])
        if not bindings:
            return
        policies = {p["metadata"]["name"]: p for p in await self._lookup(POLICIES, None)}
        req = attrs.request()
        others = _other_versions(attrs.res)
        namespace = await self._namespace(attrs.namespace) if attrs.namespace else None
        ns_labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
        denials: list[tuple[str, str, ap.Decision]] = []
        for pname in sorted(policies):
            spec = policies[pname].get("spec") or {}
            bound = [b for b in bindings if (b.get("spec") or {}).get("policyName") == pname]
            if not bound or not ap.resources_match(spec.get("matchConstraints"), req, ns_labels, others):
                continue
            ignore = spec.get("failurePolicy") == "Ignore"
            for binding in bound:
                bspec = binding.get("spec") or {}
                if not ap.resources_match(bspec.get("matchResources"), req, ns_labels, others):
                    continue
                try:
                    params = await self._params(spec.get("paramKind"), bspec.get("paramRef"), attrs.namespace)
                except ValueError as e:
                    if not ignore:
                        denials.append((pname, binding["metadata"]["name"],
                                        ap.Decision(f"failed to configure binding: {e}")))
                    continue
                for param in params:
                    bindings_doc = {"object": attrs.obj, "oldObject": attrs.old, "params": param,
                                    "request": self._request(attrs, ""), "namespaceObject": namespace}
                    for d in ap.evaluate(spec, bindings_doc):
                        if d.error and ignore:
                            continue
                        actions = bspec.get("validationActions") or ()
                        if "Deny" in actions:
                            denials.append((pname, binding["metadata"]["name"], d))
                        scope = REQUEST.get()
                        if "Warn" in actions and scope is not None:
                            scope.warnings.append(f"Validation failed for ValidatingAdmissionPolicy "
                                                  f"'{pname}' with binding '{binding['metadata']['name']}': "
                                                  f"{d.message}")
        if denials:
            pname, bname, d = denials[0]
            message = (f'{_qualified(attrs.res)} "{attrs.name}" is forbidden: ValidatingAdmissionPolicy '
                       f"'{pname}' with binding '{bname}' denied request: {d.message}")
            raise ApiError(ap.REASON_CODES.get(d.reason, 422), d.reason, message,
                           {"name": attrs.name, "group": attrs.res.group, "kind": attrs.res.name,
                            "causes": [{"message": message}]})

    async def _namespace(self, name: str) -> dict[str, Any] | None:
        return next((n for n in await self._lookup(NAMESPACES, None) if n["metadata"]["name"] == name), None)

    async def _params(self, kind: Mapping[str, Any] | None, ref: Mapping[str, Any] | None,
                      namespace: str) -> list[dict[str, Any] | None]:
        """CollectParams: [None] for a policy without paramKind; the params paramRef names or selects (in its
        namespace, else the request's for a namespaced kind); none found is ValueError under
        parameterNotFoundAction Deny and nothing to check under Allow."""
        if not kind:
            return [None]
        if not ref:
            raise ValueError("paramKind is set but the binding has no paramRef")
        res = by_kind(str(kind.get("apiVersion") or ""), str(kind.get("kind") or ""))
        if res is None:
            raise ValueError(f"failed to find resource referenced by paramKind: '{kind.get('apiVersion')}, "
                             f"Kind={kind.get('kind')}'")
        ns = str(ref.get("namespace") or (namespace if res.namespaced else ""))
        if res.namespaced and not ns:
            raise ValueError("cannot use namespaced paramRef in policy binding that matches cluster-scoped "
                             "resources")
        items = await self._lookup(res, ns or None)
        if ref.get("name"):
            found = [o for o in items if o["metadata"]["name"] == ref["name"]]
        else:
            try:
                selector = from_label_selector(ref.get("selector"), none_matches=False)
            except SelectorError as e:
                raise ValueError(str(e)) from None
            found = sorted((o for o in items if selector.matches((o["metadata"].get("labels") or {}))),
                           key=lambda o: o["metadata"]["name"])
        if not found and ref.get("parameterNotFoundAction", "Deny") == "Deny":
            raise ValueError("no params found for policy binding with `Deny` parameterNotFoundAction")
        return list(found)

    # ------------------------------------------------------------------ matching
    async def _hooks(self, configs: Resource) -> list[tuple[str, dict[str, Any]]]:
        items = sorted(await self._lookup(configs, None), key=lambda c: c["metadata"]["name"])
        return [(c["metadata"]["name"], h) for c in items
                for h in c.get("webhooks") or () if isinstance(h, dict)]

    async def _should_call(self, hook: dict[str, Any], attrs: Attributes) -> bool:
        """ShouldCallHook: a rule (or, under matchPolicy Equivalent, the same resource in another served
        version), then the namespace and object selectors, then the matchConditions."""
        rules = [r for r in hook.get("rules") or () if isinstance(r, dict)]
        req = attrs.request()
        if not any(aw.rule_matches(r, req) for r in rules):
            if hook.get("matchPolicy", "Equivalent") != "Equivalent":
                return False
            if not any(aw.rule_matches(r, req, v) for r in rules for v in _other_versions(attrs.res)):
                return False
        ns_labels: Mapping[str, str] | None = None
        if hook.get("namespaceSelector") and attrs.namespace:
            ns = next((n for n in await self._lookup(NAMESPACES, None)
                       if n["metadata"]["name"] == attrs.namespace), None)
            ns_labels = ((ns or {}).get("metadata") or {}).get("labels") or {}
        if not aw.namespace_selected(hook, req, ns_labels) or not aw.object_selected(hook, req):
            return False
        conditions = hook.get("matchConditions")
        if not conditions:
            return True
        bindings = {"object": attrs.obj, "oldObject": attrs.old, "request": self._request(attrs, "")}
        try:
            return aw.match_conditions_hold(conditions, bindings)
        except aw.MatchConditionError as e:
            if hook.get("failurePolicy") == "Ignore":
                return False
            raise ApiError(403, "Forbidden", f'{_qualified(attrs.res)} "{attrs.name}" is forbidden: '
                           f"failed to evaluate match conditions of webhook \"{hook.get('name')}\": {e}",
                           {"name": attrs.name, "group": attrs.res.group, "kind": attrs.res.name}) from None

    # ------------------------------------------------------------------ calling
    def _request(self, attrs: Attributes, uid: str) -> dict[str, Any]:
        """The AdmissionRequest (admission.k8s.io/v1)."""
        scope = REQUEST.get()
        user = scope.user if scope is not None else LOOPBACK_USER
        res = attrs.res
        kind = {"group": res.group, "version": res.version, "kind": res.kind}
        resource = {"group": res.group, "version": res.version, "resource": res.name}
        user_info: dict[str, Any] = {"username": user.name, "groups": list(user.groups)}
        if user.uid:
            user_info["uid"] = user.uid
        if user.extra:
            user_info["extra"] = {k: list(v) for k, v in user.extra}
        out: dict[str, Any] = {"uid": uid, "kind": kind, "resource": resource, "requestKind": dict(kind),
                               "requestResource": dict(resource), "name": attrs.name,
                               "operation": attrs.operation, "userInfo": user_info, "object": attrs.obj,
                               "oldObject": attrs.old, "dryRun": attrs.dry_run}
        if attrs.namespace:
            out["namespace"] = attrs.namespace
        if attrs.subresource:
            out["subResource"] = out["requestSubResource"] = attrs.subresource
        options_kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}
        if attrs.operation in options_kind:
            options = dict(attrs.options or {})
            if attrs.dry_run:
                options["dryRun"] = ["All"]
            out["options"] = {**options, "apiVersion": "meta.k8s.io/v1",
                              "kind": options_kind[attrs.operation]}
        return out

    async def _call(self, hook: dict[str, Any], attrs: Attributes, mutating: bool) -> dict[str, Any]:
        """One AdmissionReview round trip: the webhook's `response` when it allows, ApiError when it refuses,
        CallError when it could not be asked or answered nonsense."""
        name = str(hook.get("name"))
        if attrs.dry_run and hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            raise ApiError(400, "BadRequest", f'admission webhook "{name}" does not support dry run')
        accepted = hook.get("admissionReviewVersions") or ()
        version = next((v for v in accepted if v in aw.REVIEW_VERSIONS), None)
        if version is None:
            raise CallError(name, "webhook does not accept known AdmissionReview versions")
        uid = str(uuid.uuid4())
        review = {"apiVersion": f"admission.k8s.io/{version}", "kind": "AdmissionReview",
                  "request": self._request(attrs, uid)}
        timeout = int(hook.get("timeoutSeconds") or 10)
        try:
            data = await self.client.post(hook.get("clientConfig") or {}, json.dumps(review).encode(),
                                          timeout)
        except CallFailed as e:
            raise CallError(name, f"failed to call webhook: {e}") from None
        try:
            response = _verify(data, version, uid, mutating)
        except ValueError as e:
            raise CallError(name, f"received invalid webhook response: {e}") from None
        scope = REQUEST.get()
        if scope is not None:
            scope.warnings.extend(str(w) for w in response.get("warnings") or () if w)
        if not response.get("allowed"):
            raise denied(name, response.get("status"))
        return response


def _verify(data: bytes, version: str, uid: str, mutating: bool) -> dict[str, Any]:
    """VerifyAdmissionResponse: the review's kind, the response's uid, a patch only from a mutating webhook
    and only with its type."""
    try:
        review = json.loads(data)
    except ValueError as e:
        raise ValueError(f"couldn't decode the response: {e}") from None
    if not isinstance(review, dict):
        raise ValueError("the response is not an AdmissionReview object")
    want = f"admission.k8s.io/{version}"
    if review.get("apiVersion") != want or review.get("kind") != "AdmissionReview":
        raise ValueError(f"expected webhook response of {want}, Kind=AdmissionReview, got "
                         f"{review.get('apiVersion')}, Kind={review.get('kind')}")
    response = review.get("response")
    if not isinstance(response, dict):
        raise ValueError("webhook response was absent")
    if response.get("uid") != uid:
        raise ValueError(f'expected response.uid="{uid}", got "{response.get("uid") or ""}"')
    if response.get("patch"):
        if not mutating:
            raise ValueError("validating webhook may not return response.patch")
        if version == "v1" and not response.get("patchType"):
            raise ValueError("webhook returned response.patch but not response.patchType")
        response = copy.copy(response)
        response.setdefault("patchType", "JSONPatch")
    return response


def _other_versions(res: Resource) -> tuple[str, ...]:
    """The other served versions of the same resource (what matchPolicy Equivalent also matches)."""
    return tuple(r.version for r in all_resources()
                 if r.group == res.group and r.name == res.name and r.version != res.version)


def _qualified(res: Resource) -> str:
    return f"{res.name}.{res.group}" if res.group else res.name
