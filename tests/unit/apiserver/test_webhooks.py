"""Admission webhooks through the registry, against a real HTTPS webhook server on loopback: what is sent,
patches, refusals, failurePolicy, timeouts, selectors, matchConditions, reinvocation, dry run, warnings,
Service resolution through EndpointSlices, and the configurations' own validation."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from nodeagent import pki
from nodeagent.api.resources import builtin
from nodeagent.apiserver.auth import User
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.registry import Registry
from nodeagent.apiserver.webhooks import REQUEST, RequestScope
from nodeagent.store.memory import MemoryStore

NS, CMS, PODS = builtin("", "v1", "namespaces"), builtin("", "v1", "configmaps"), builtin("", "v1", "pods")
SVC, SLICES = builtin("", "v1", "services"), builtin("discovery.k8s.io", "v1", "endpointslices")
MWC = builtin("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations")
VWC = builtin("admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations")
Handler = Callable[[dict[str, Any]], Any]


class WebhookServer:
    """An HTTPS server on loopback answering AdmissionReviews with whatever `answer` returns."""

    def __init__(self, tmp: Path, dns_name: str) -> None:
        cert, key = pki.self_signed(dns_name, (dns_name,))
        (tmp / "tls.crt").write_bytes(cert)
        (tmp / "tls.key").write_bytes(key)
        self.ca_bundle = base64.b64encode(cert).decode()
        self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ctx.load_cert_chain(tmp / "tls.crt", tmp / "tls.key")
        self.reviews: list[dict[str, Any]] = []
        self.answers: dict[str, Handler] = {}
        self.port = 0
        self.paths: list[str] = []

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        review = await request.json()
        self.reviews.append(review)
        self.paths.append(request.path_qs)
        out = self.answers[request.path](review["request"])
        if asyncio.iscoroutine(out):
            out = await out
        if isinstance(out, (bytes, str)):
            return web.Response(body=out, content_type="application/json")
        return web.json_response(out)

    async def start(self) -> web.AppRunner:
        app = web.Application()
        app.router.add_post("/{tail:.*}", self._handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self.ctx)
        await site.start()
        self.port = runner.addresses[0][1]
        return runner


def review(req: dict[str, Any], allowed: bool = True, patch: list[Any] | None = None,
           **extra: Any) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": req["uid"], "allowed": allowed, **extra}
    if patch is not None:
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        response["patchType"] = "JSONPatch"
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


@pytest.fixture
async def env(tmp_path):
    server = WebhookServer(tmp_path, "localhost")
    runner = await server.start()
    reg = Registry(MemoryStore())
    reg.enable_webhooks()
    await reg.create(NS, None, {"metadata": {"name": "d", "labels": {"team": "a"}}})
    await reg.create(NS, None, {"metadata": {"name": "e"}})
    REQUEST.set(RequestScope(User("alice", ("devs", "system:authenticated"), uid="u1")))
    yield reg, server
    await reg.close()
    await runner.cleanup()


def hook(server: WebhookServer, name: str, path: str, **over: Any) -> dict[str, Any]:
    h: dict[str, Any] = {
        "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "clientConfig": {"url": f"https://localhost:{server.port}{path}", "caBundle": server.ca_bundle},
        "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                   "resources": ["configmaps"]}]}
    h.update(over)
    return h


async def configure(reg: Registry, res: Any, *hooks: dict[str, Any], name: str = "cfg") -> None:
    await reg.create(res, None, {"metadata": {"name": name}, "webhooks": list(hooks)})


async def test_mutating_patch_is_applied_and_the_review_says_who_and_what(env):
    reg, server = env
    server.answers["/label"] = lambda r: review(r, patch=[
        {"op": "add", "path": "/metadata/labels", "value": {"injected": "yes"}}])
    await configure(reg, MWC, hook(server, "label.example.com", "/label"))
    cm = await reg.create(CMS, "d", {"metadata": {"name": "one"}, "data": {"k": "v"}})
    assert cm["metadata"]["labels"] == {"injected": "yes"}
    stored = await reg.get(CMS, "d", "one")
    assert stored["metadata"]["labels"] == {"injected": "yes"} and stored["metadata"]["uid"]
    sent = server.reviews[0]
    assert sent["apiVersion"] == "admission.k8s.io/v1" and sent["kind"] == "AdmissionReview"
    req = sent["request"]
    assert req["operation"] == "CREATE" and req["namespace"] == "d" and req["name"] == "one"
    assert req["kind"] == {"group": "", "version": "v1", "kind": "ConfigMap"}
    assert req["resource"] == {"group": "", "version": "v1", "resource": "configmaps"}
    assert req["userInfo"] == {"username": "alice", "uid": "u1", "groups": ["devs", "system:authenticated"]}
    assert req["object"]["data"] == {"k": "v"} and req["oldObject"] is None and req["dryRun"] is False
    assert req["options"]["kind"] == "CreateOptions"
    assert server.paths[0] == "/label?timeout=10s"


async def test_validating_refusal_carries_the_webhooks_status_and_nothing_is_stored(env):
    reg, server = env
    server.answers["/deny"] = lambda r: review(r, False, status={"code": 403, "reason": "Forbidden",
                                                                "message": "configmaps need an owner label"})
    await configure(reg, VWC, hook(server, "deny.example.com", "/deny"))
    with pytest.raises(ApiError) as e:
        await reg.create(CMS, "d", {"metadata": {"name": "two"}})
    assert e.value.code == 403 and e.value.reason == "Forbidden"
    assert e.value.message == ('admission webhook "deny.example.com" denied the request: '
                               "configmaps need an owner label")
    with pytest.raises(ApiError) as nf:
        await reg.get(CMS, "d", "two")
    assert nf.value.code == 404


async def test_a_refusal_without_status_is_400_without_explanation(env):
    reg, server = env
    server.answers["/deny"] = lambda r: review(r, False)
    await configure(reg, VWC, hook(server, "deny.example.com", "/deny"))
    with pytest.raises(ApiError) as e:
        await reg.create(CMS, "d", {"metadata": {"name": "two"}})
    assert e.value.code == 400
    assert e.value.message == 'admission webhook "deny.example.com" denied the request without explanation'


async def test_dead_webhook_fails_closed_or_open_by_failure_policy(env):
    reg, server = env
    dead = {"url": "https://localhost:1/x", "caBundle": server.ca_bundle}
    await configure(reg, VWC, hook(server, "dead.example.com", "/x", clientConfig=dead, failurePolicy="Fail"))
    with pytest.raises(ApiError) as e:
        await reg.create(CMS, "d", {"metadata": {"name": "three"}})
    assert e.value.code == 500 and e.value.reason == "InternalError"
    assert e.value.message.startswith('Internal error occurred: failed calling webhook "dead.example.com": '
                                      'failed to call webhook: Post "https://localhost:1/x?timeout=10s": ')
    assert "connection refused" in e.value.message
    cfg = await reg.get(VWC, None, "cfg")
    cfg["webhooks"][0]["failurePolicy"] = "Ignore"
    await reg.update(VWC, None, "cfg", cfg)
    assert (await reg.create(CMS, "d", {"metadata": {"name": "three"}}))["metadata"]["name"] == "three"


async def test_timeout_follows_failure_policy(env):
    reg, server = env

    async def slow(r: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(3)
        return review(r)
    server.answers["/slow"] = slow
    await configure(reg, VWC, hook(server, "slow.example.com", "/slow", timeoutSeconds=1))
    with pytest.raises(ApiError) as e:
        await reg.create(CMS, "d", {"metadata": {"name": "four"}})
    assert e.value.code == 500
    assert e.value.message.endswith(f'Post "https://localhost:{server.port}/slow?timeout=1s": '
                                    "context deadline exceeded")
    assert server.paths[-1] == "/slow?timeout=1s"


@pytest.mark.parametrize("body, why", [
    (b"not json", "received invalid webhook response: couldn't decode the response"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                 "response": {"uid": "wrong", "allowed": True}}), 'expected response.uid='),
    (json.dumps({"apiVersion": "v1", "kind": "Status"}), "expected webhook response of admission.k8s.io/v1"),
])
async def test_garbage_answers_are_call_failures(env, body, why):
    reg, server = env
    server.answers["/junk"] = lambda r: body
    await configure(reg, VWC, hook(server, "junk.example.com", "/junk"))
    with pytest.raises(ApiError) as e:
        await reg.create(CMS, "d", {"metadata": {"name": "five"}})
    assert e.value.code == 500 and why in e.value.message
    assert 'failed calling webhook "junk.example.com"' in e.value.message


async def test_validating_webhook_may_not_patch(env):
    reg, server = env
    server.answers["/p"] = lambda r: review(r, patch=[{"op": "add", "path": "/data", "value": {}}])
    await configure(reg, VWC, hook(server, "p.example.com", "/p"))
    with pytest.raises(ApiError) as e:
        await reg.create(CMS, "d", {"metadata": {"name": "six"}})
    assert "validating webhook may not return response.patch" in e.value.message


async def test_namespace_and_object_selectors(env):
    reg, server = env
    server.answers["/deny"] = lambda r: review(r, False, status={"message": "no"})
    await configure(reg, VWC, hook(server, "ns.example.com", "/deny",
                                   namespaceSelector={"matchLabels": {"team": "a"}}),
                    hook(server, "obj.example.com", "/deny",
                         objectSelector={"matchExpressions": [{"key": "guarded", "operator": "Exists"}]}))
    with pytest.raises(ApiError) as e:
        await reg.create(CMS, "d", {"metadata": {"name": "x"}})  # namespace d has team=a
    assert '"ns.example.com"' in e.value.message
    await reg.create(CMS, "e", {"metadata": {"name": "x"}})  # neither selector matches
    with pytest.raises(ApiError) as e:
        await reg.create(CMS, "e", {"metadata": {"name": "y", "labels": {"guarded": ""}}})
    assert '"obj.example.com"' in e.value.message
    assert len(server.reviews) == 2


async def test_rules_operations_resources_and_scope(env):
    reg, server = env
    server.answers["/deny"] = lambda r: review(r, False, status={"message": "no deletes"})
    await configure(reg, VWC, hook(server, "del.example.com", "/deny", rules=[
        {"operations": ["DELETE"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"],
         "scope": "Namespaced"}]))
    await reg.create(CMS, "d", {"metadata": {"name": "keep"}})
    with pytest.raises(ApiError) as e:
        await reg.delete(CMS, "d", "keep")
    assert "no deletes" in e.value.message
    req = server.reviews[-1]["request"]
    assert req["operation"] == "DELETE" and req["object"] is None
    assert req["oldObject"]["metadata"]["name"] == "keep"
    assert req["options"]["kind"] == "DeleteOptions"
    await reg.delete(NS, None, "e")  # a Namespace is cluster-scoped: not matched
    assert (await reg.get(CMS, "d", "keep"))["metadata"]["name"] == "keep"


async def test_match_conditions_skip_or_call(env):
    reg, server = env
    server.answers["/deny"] = lambda r: review(r, False, status={"message": "big"})
    await configure(reg, VWC, hook(server, "cel.example.com", "/deny", matchConditions=[
        {"name": "has-size", "expression": "has(object.data) && 'size' in object.data"},
        {"name": "not-bob", "expression": "request.userInfo.username != 'bob'"}]))
    await reg.create(CMS, "d", {"metadata": {"name": "small"}, "data": {"a": "b"}})
    assert not server.reviews
    with pytest.raises(ApiError):
        await reg.create(CMS, "d", {"metadata": {"name": "big"}, "data": {"size": "9"}})
    REQUEST.set(RequestScope(User("bob")))
    await reg.create(CMS, "d", {"metadata": {"name": "big"}, "data": {"size": "9"}})
    assert len(server.reviews) == 1


async def test_reinvocation_if_needed(env):
    reg, server = env
    calls: list[str] = []

    def first(r: dict[str, Any]) -> dict[str, Any]:
        calls.append("first")
        labels = r["object"]["metadata"].get("labels") or {}
        return review(r, patch=[{"op": "add", "path": "/metadata/labels",
                                 "value": {**labels, "first": str(len(labels))}}])

    def second(r: dict[str, Any]) -> dict[str, Any]:
        calls.append("second")
        return review(r, patch=[{"op": "add", "path": "/metadata/annotations", "value": {"second": "y"}}])
    server.answers["/first"], server.answers["/second"] = first, second
    await configure(reg, MWC, hook(server, "a.example.com", "/first", reinvocationPolicy="IfNeeded"),
                    hook(server, "b.example.com", "/second"))
    cm = await reg.create(CMS, "d", {"metadata": {"name": "r"}})
    assert calls == ["first", "second", "first"]
    assert cm["metadata"]["annotations"] == {"second": "y"}
    assert cm["metadata"]["labels"] == {"first": "1"}  # the second round saw the first round's label


async def test_dry_run_needs_side_effects_none(env):
    reg, server = env
    server.answers["/ok"] = lambda r: review(r)
    await configure(reg, VWC, hook(server, "ok.example.com", "/ok", sideEffects="NoneOnDryRun"))
    await reg.create(CMS, "d", {"metadata": {"name": "dry"}}, dry_run=True)
    assert server.reviews[-1]["request"]["dryRun"] is True
    cfg = await reg.get(VWC, None, "cfg")
    cfg["webhooks"][0]["sideEffects"] = "Some"  # stored before v1 refused it
    await reg.store.update(VWC.key(None, "cfg"), cfg)
    with pytest.raises(ApiError) as e:
        await reg.create(CMS, "d", {"metadata": {"name": "dry"}}, dry_run=True)
    assert e.value.code == 400
    assert e.value.message == 'admission webhook "ok.example.com" does not support dry run'


async def test_warnings_reach_the_request_scope(env):
    reg, server = env
    server.answers["/warn"] = lambda r: review(r, warnings=["configmap without owner"])
    await configure(reg, VWC, hook(server, "warn.example.com", "/warn"))
    scope = RequestScope(User("bob"))
    REQUEST.set(scope)
    await reg.create(CMS, "d", {"metadata": {"name": "w"}})
    assert scope.warnings == ["configmap without owner"]


async def test_service_reference_resolves_through_endpoint_slices(tmp_path):
    server = WebhookServer(tmp_path, "hooks.d.svc")
    runner = await server.start()
    reg = Registry(MemoryStore())
    reg.enable_webhooks()
    try:
        await reg.create(NS, None, {"metadata": {"name": "d"}})
        server.answers["/mutate"] = lambda r: review(r, patch=[
            {"op": "add", "path": "/metadata/labels", "value": {"via": "service"}}])
        cfg = {"service": {"name": "hooks", "namespace": "d", "path": "/mutate"},
               "caBundle": server.ca_bundle}
        await configure(reg, MWC, hook(server, "svc.example.com", "/mutate", clientConfig=cfg))
        with pytest.raises(ApiError) as e:
            await reg.create(CMS, "d", {"metadata": {"name": "a"}})
        assert e.value.message == ('Internal error occurred: failed calling webhook "svc.example.com": '
                                   'failed to call webhook: services "hooks" not found')
        await reg.create(SVC, "d", {"metadata": {"name": "hooks"}, "spec": {
            "ports": [{"name": "https", "port": 443, "targetPort": server.port}], "clusterIP": "None"}})
        await reg.create(SLICES, "d", {"metadata": {"name": "hooks-1", "labels": {
            "kubernetes.io/service-name": "hooks"}}, "addressType": "IPv4",
            "ports": [{"name": "https", "port": server.port, "protocol": "TCP"}],
            "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}]})
        cm = await reg.create(CMS, "d", {"metadata": {"name": "b"}})
        assert cm["metadata"]["labels"] == {"via": "service"}
        assert server.paths[-1] == "/mutate?timeout=10s"
    finally:
        await reg.close()
        await runner.cleanup()


async def test_configurations_are_validated_and_defaulted(env):
    reg, server = env
    bad = {"name": "short", "clientConfig": {"url": "http://x/y?q=1"}, "timeoutSeconds": 31,
           "rules": [{"operations": ["PATCH"], "apiGroups": [""], "apiVersions": ["v1"],
                      "resources": ["pods"]}], "matchConditions": [{"name": "c", "expression": "1 +"}]}
    with pytest.raises(ApiError) as e:
        await configure(reg, VWC, bad)
    assert e.value.code == 422
    fields = {c["field"]: c["message"] for c in (e.value.details or {})["causes"]}
    assert "at least three segments" in fields["webhooks[0].name"]
    assert fields["webhooks[0].admissionReviewVersions"].startswith("Required value")
    assert fields["webhooks[0].sideEffects"].startswith("Required value")
    assert "between 1 and 30" in fields["webhooks[0].timeoutSeconds"]
    assert "'https' is the only allowed URL scheme" in fields["webhooks[0].clientConfig.url"]
    assert fields["webhooks[0].rules[0].operations[0]"].startswith('Unsupported value: "PATCH"')
    assert "compilation failed" in fields["webhooks[0].matchConditions[0].expression"]
    await configure(reg, MWC, hook(server, "ok.example.com", "/ok"))
    stored = (await reg.get(MWC, None, "cfg"))["webhooks"][0]
    assert (stored["failurePolicy"], stored["matchPolicy"], stored["timeoutSeconds"],
            stored["reinvocationPolicy"], stored["namespaceSelector"], stored["objectSelector"],
            stored["rules"][0]["scope"]) == ("Fail", "Equivalent", 10, "Never", {}, {}, "*")


async def test_webhook_configurations_are_never_sent_to_webhooks(env):
    reg, server = env
    await configure(reg, VWC, hook(server, "all.example.com", "/none", rules=[
        {"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}],
        clientConfig={"url": "https://localhost:1/"}))
    cfg = await reg.get(VWC, None, "cfg")
    cfg["webhooks"][0]["failurePolicy"] = "Ignore"
    await reg.update(VWC, None, "cfg", cfg)  # a dead catch-all webhook does not lock its own fix out
    await reg.delete(VWC, None, "cfg")


def test_kubectl_apply_patches_webhooks_by_name():
    """webhooks and matchConditions merge by name (patchMergeKey), so a re-apply changing one field of one
    webhook keeps the rest of it."""
    from nodeagent.api.patch import strategic_merge

    cur = {"webhooks": [{"name": "a.example.com", "sideEffects": "None", "failurePolicy": "Fail",
                         "matchConditions": [{"name": "x", "expression": "true"}]},
                        {"name": "b.example.com", "sideEffects": "None"}]}
    patch = {"webhooks": [{"name": "a.example.com", "failurePolicy": "Ignore"}]}
    out = strategic_merge(cur, patch)
    assert out["webhooks"][0] == {"name": "a.example.com", "sideEffects": "None", "failurePolicy": "Ignore",
                                  "matchConditions": [{"name": "x", "expression": "true"}]}
    assert out["webhooks"][1] == {"name": "b.example.com", "sideEffects": "None"}


async def test_calls_are_counted_as_kube_apiserver_counts_them(tmp_path):
    from nodeagent.apiserver.metrics import Metrics

    server = WebhookServer(tmp_path, "localhost")
    runner = await server.start()
    metrics = Metrics()
    reg = Registry(MemoryStore())
    reg.enable_webhooks(metrics)
    try:
        await reg.create(NS, None, {"metadata": {"name": "d"}})
        server.answers["/deny"] = lambda r: review(r, False, status={"code": 403, "message": "no"})
        dead = {"url": "https://localhost:1/x", "caBundle": server.ca_bundle}
        await configure(reg, VWC, hook(server, "deny.example.com", "/deny"),
                        hook(server, "dead.example.com", "/x", clientConfig=dead, failurePolicy="Ignore"))
        with pytest.raises(ApiError):
            await reg.create(CMS, "d", {"metadata": {"name": "x"}})
        text = metrics.render().decode()
        assert ('apiserver_admission_webhook_rejection_count_total{error_type="no_error",'
                'name="deny.example.com",operation="CREATE",rejection_code="403",'
                'type="validating"} 1.0') in text
        assert ('apiserver_admission_webhook_fail_open_count_total{name="dead.example.com",'
                'type="validating"} 1.0') in text
        assert 'apiserver_admission_webhook_admission_duration_seconds_count{name="deny.example.com",' \
            'operation="CREATE",rejected="true",type="validating"} 1.0' in text
    finally:
        await reg.close()
        await runner.cleanup()
