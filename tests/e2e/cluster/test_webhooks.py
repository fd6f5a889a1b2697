"""Admission webhooks under `nodeagent up` (issue 21 item 5), with kubectl 1.32 and 1.20: a small HTTPS
webhook server (tests/e2e/cluster/webhook/server.py) runs as a pod from a locally built Python image, behind a
Service the apiserver resolves through its EndpointSlices, its certificate checked against the caBundle for
`webhook.default.svc`. A mutating webhook adds a label in namespaces its namespaceSelector picks; a
validating one refuses objects without an owner label with its own message (warning on the others); a dead
Service, a garbage answer and a timeout follow the failurePolicy, with kube-apiserver's Status messages."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent import pki
from nodeagent.testing.images import Entry, build
from nodeagent.testing.python_image import python_spec
from tests.e2e.kubelet.test_node_up import Cluster
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
SERVER = Path(__file__).parent / "webhook" / "server.py"
IMAGE = "localhost/webhook-server:v1"
KUBECTLS = {"1.32": shutil.which("kubectl") or "/usr/bin/kubectl",
            "1.20": str(REPO / ".cache" / "kubectl-1.20" / "usr" / "bin" / "kubectl")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    d = tmp_path_factory.mktemp("webhooks")
    app = (Entry("app", kind="dir", mode=0o755), Entry("app/server.py", data=SERVER.read_bytes()))
    image = build(python_spec("localhost/webhook-server", "v1", app=app, cmd=("python3", "/app/server.py")),
                  d / "build")
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(d / "images"), "import",
                    "--no-progress", str(image.docker_archive)], check=True, capture_output=True)
    c = Cluster(d, unique("nd"), unique("kb"))
    try:
        c.start()
        yield c
    finally:
        rc = c.shutdown()
    assert rc == 0, c.tail()


@pytest.fixture(scope="module")
def webhook(cluster: Cluster) -> str:
    """The server pod and its Service; the caBundle (base64 PEM) that verifies it."""
    c = cluster
    cert, key = pki.self_signed("webhook.default.svc", ("webhook.default.svc",))
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "webhook-tls"},
              "type": "kubernetes.io/tls", "data": {"tls.crt": base64.b64encode(cert).decode(),
                                                    "tls.key": base64.b64encode(key).decode()}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "webhook"},
               "spec": {"selector": {"app": "webhook"}, "ports": [{"port": 443, "targetPort": 8443}]}}
    c.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([secret, service]))
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "webhook", "labels": {"app": "webhook"}},
             "spec": {"terminationGracePeriodSeconds": 1, "automountServiceAccountToken": False,
                      "containers": [{"name": "server", "image": IMAGE, "imagePullPolicy": "Never",
                                      "readinessProbe": {"tcpSocket": {"port": 8443}, "periodSeconds": 1},
                                      "volumeMounts": [{"name": "tls", "mountPath": "/tls"}]}],
                      "volumes": [{"name": "tls", "secret": {"secretName": "webhook-tls"}}]}})
    c.wait_pod("webhook", lambda p: any(x.get("ready") for x in
                                        (p.get("status") or {}).get("containerStatuses") or []), timeout=90)
    end = time.monotonic() + 30
    while not _slice_ready(c):
        assert time.monotonic() < end, c.kubectl("get", "endpointslices", "-o", "yaml")
        time.sleep(0.3)
    for ns, labels in (("tenant", {"webhooks": "on"}), ("other", {})):
        c.kubectl("apply", "-f", "-", input=yaml.safe_dump(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}))
    return base64.b64encode(cert).decode()


def _slice_ready(c: Cluster) -> bool:
    slices = json.loads(c.kubectl("get", "endpointslices", "-l", "kubernetes.io/service-name=webhook",
                                  "-o", "json"))["items"]
    return any((e.get("conditions") or {}).get("ready") for s in slices for e in s.get("endpoints") or ())


def _hook(name: str, path: str, ca: str, **over: Any) -> dict[str, Any]:
    h: dict[str, Any] = {
        "name": name, "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "clientConfig": {"service": {"name": "webhook", "namespace": "default", "path": path},
                         "caBundle": ca},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                   "resources": ["configmaps"]}],
        "namespaceSelector": {"matchLabels": {"webhooks": "on"}}}
    h.update(over)
    return h


def _configure(c: Cluster, kind: str, name: str, *hooks: dict[str, Any]) -> None:
    c.kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": kind, "metadata": {"name": name},
        "webhooks": list(hooks)}))


def _kubectl(c: Cluster, version: str, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    binary = KUBECTLS[version]
    if not Path(binary).exists():
        pytest.skip(f"kubectl {version} not unpacked at {binary} (make install)")
    return subprocess.run([binary, *args], capture_output=True, text=True, env=c.env, timeout=90, input=input)


@pytest.mark.parametrize("version", ["1.32", "1.20"])
def test_mutating_webhook_adds_a_label_where_its_namespace_selector_says(cluster: Cluster, webhook: str,
                                                                          version: str) -> None:
    c = cluster
    _configure(c, "MutatingWebhookConfiguration", "label", _hook("label.example.com", "/label", webhook))
    try:
        name = unique("cm")
        p = _kubectl(c, version, "-n", "tenant", "create", "configmap", name, "--from-literal=k=v")
        assert p.returncode == 0, p.stderr + c.tail()
        got = json.loads(c.kubectl("-n", "tenant", "get", "configmap", name, "-o", "json"))
        assert got["metadata"]["labels"] == {"webhook.example.com/seen": "true"}
        assert got["data"] == {"k": "v"}
        p = _kubectl(c, version, "-n", "other", "create", "configmap", name, "--from-literal=k=v")
        assert p.returncode == 0, p.stderr
        got = json.loads(c.kubectl("-n", "other", "get", "configmap", name, "-o", "json"))
        assert "labels" not in got["metadata"]  # namespace `other` is not selected
        logs = c.kubectl("logs", "webhook")
        assert "POST /label?timeout=10s" in logs
    finally:
        c.kubectl("delete", "mutatingwebhookconfiguration", "label", check=False)


@pytest.mark.parametrize("version", ["1.32", "1.20"])
def test_validating_webhook_refuses_with_its_message_and_warns(cluster: Cluster, webhook: str,
                                                               version: str) -> None:
    c = cluster
    _configure(c, "ValidatingWebhookConfiguration", "owners", _hook("owners.example.com", "/deny", webhook))
    try:
        name = unique("cm")
        p = _kubectl(c, version, "-n", "tenant", "create", "configmap", name)
        assert p.returncode == 1
        assert ('admission webhook "owners.example.com" denied the request: every object needs an owner '
                "label (asked by admin)") in p.stderr
        assert c.kubectl("-n", "tenant", "get", "configmap", name, check=False) == ""  # nothing stored
        manifest: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": name, "namespace": "tenant"}}
        p = _kubectl(c, version, "apply", "-f", "-", input=yaml.safe_dump(manifest))
        assert p.returncode == 1
        assert 'Error from server (Forbidden): error when creating "STDIN": admission webhook ' \
            '"owners.example.com" denied the request: every object needs an owner label' in p.stderr, p.stderr
        manifest["metadata"]["labels"] = {"owner": "ops"}
        p = _kubectl(c, version, "apply", "-f", "-", input=yaml.safe_dump(manifest))
        assert p.returncode == 0, p.stderr
        assert "Warning: owner ops noted" in p.stderr
    finally:
        c.kubectl("delete", "validatingwebhookconfiguration", "owners", check=False)


def test_failure_policy_with_a_dead_service_a_garbage_answer_and_a_timeout(cluster: Cluster,
                                                                           webhook: str) -> None:
    c = cluster
    dead: dict[str, Any] = {"service": {"name": "nobody", "namespace": "default", "path": "/deny"},
                            "caBundle": webhook}
    stranger = base64.b64encode(pki.self_signed("x")[0]).decode()
    cases = [
        ("dead.example.com", {"clientConfig": dead}, 'failed to call webhook: services "nobody" not found'),
        ("garbage.example.com", {"clientConfig": {**_hook("x", "/garbage", webhook)["clientConfig"]}},
         "received invalid webhook response: couldn't decode the response"),
        ("tls.example.com", {"clientConfig": {"service": dead["service"] | {"name": "webhook"},
                                              "caBundle": stranger}},
         "tls: failed to verify certificate"),
    ]
    for hook_name, over, why in cases:
        _configure(c, "ValidatingWebhookConfiguration", "failing", _hook(hook_name, "/deny", webhook, **over))
        try:
            p = subprocess.run(["kubectl", "-n", "tenant", "create", "configmap", unique("cm")],
                               capture_output=True, text=True, env=c.env, timeout=90)
            assert p.returncode == 1
            assert f'Internal error occurred: failed calling webhook "{hook_name}": ' in p.stderr, p.stderr
            assert why in p.stderr, p.stderr
            _configure(c, "ValidatingWebhookConfiguration", "failing",
                       _hook(hook_name, "/deny", webhook, failurePolicy="Ignore", **over))
            c.kubectl("-n", "tenant", "create", "configmap", unique("cm"))  # fails open
        finally:
            c.kubectl("delete", "validatingwebhookconfiguration", "failing", check=False)


def test_a_webhook_that_does_not_answer_in_time(cluster: Cluster, webhook: str) -> None:
    c = cluster
    _configure(c, "ValidatingWebhookConfiguration", "slow",
               _hook("slow.example.com", "/slow", webhook, timeoutSeconds=2))
    try:
        p = subprocess.run(["kubectl", "-n", "tenant", "create", "configmap", unique("cm")],
                           capture_output=True, text=True, env=c.env, timeout=90)
        assert p.returncode == 1
        assert ('Internal error occurred: failed calling webhook "slow.example.com": failed to call '
                'webhook: Post "https://webhook.default.svc:443/slow?timeout=2s": context deadline exceeded'
                ) in p.stderr
    finally:
        c.kubectl("delete", "validatingwebhookconfiguration", "slow", check=False)


@pytest.mark.parametrize("version", ["1.32", "1.20"])
def test_validating_admission_policy_with_kubectl(cluster: Cluster, version: str) -> None:
    c = cluster
    name = unique("vap")
    c.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name},
         "spec": {"matchConstraints": {"resourceRules": [
             {"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
              "resources": ["configmaps"]}]},
             "validations": [{"expression": "!has(object.data) || size(object.data) <= 1",
                              "messageExpression": "'at most one key, got ' + string(size(object.data))"}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"],
                  "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name":
                                                                           "other"}}}}}]))
    try:
        cm = unique("cm")
        p = _kubectl(c, version, "-n", "other", "create", "configmap", cm, "--from-literal=a=1",
                     "--from-literal=b=2")
        assert p.returncode == 1
        assert (f'configmaps "{cm}" is forbidden: ValidatingAdmissionPolicy \'{name}\' with binding '
                f"'{name}' denied request: at most one key, got 2") in p.stderr, p.stderr
        p = _kubectl(c, version, "-n", "tenant", "create", "configmap", cm, "--from-literal=a=1",
                     "--from-literal=b=2")
        assert p.returncode == 0, p.stderr  # not the bound namespace
    finally:
        c.kubectl("delete", "validatingadmissionpolicybinding", name, check=False)
        c.kubectl("delete", "validatingadmissionpolicy", name, check=False)
