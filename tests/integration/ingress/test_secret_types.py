"""TLS from a Secret of any type, as ingress-nginx reads `tls.crt`/`tls.key` whatever the type: under the
control plane's credential (every Secret is read) and under a joined node's own (the Node authorizer lets it
read the TLS Secrets and, by name, the ones Ingresses name); a Secret without the keys gets the default
certificate and a Warning event in ingress-nginx's words."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nodeagent.pki import self_signed
from nodeagent.testing.apiserver import ServerProcess
from tests.harness.node_credential import node_kubeconfig
from tests.integration.ingress.conftest import IngressProcess, eventually, start_ingress
from tests.integration.ingress.test_ingress import served_cn, slice_for

pytestmark = pytest.mark.e2e


def secret(name: str, type_: str, data: dict[str, bytes]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": type_,
            "metadata": {"name": name, "namespace": "default"},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}


@pytest.fixture(scope="module")
def objects(server: ServerProcess, api: Callable[..., Any], backends: tuple[int, list[Any]]) -> None:
    """An Opaque Secret with a keypair for st-opaque.test, one without for st-nokeys.test, one Ingress."""
    port, _ = backends
    crt, key = self_signed("st-opaque.test", ("st-opaque.test",))
    hosts = ("st-opaque.test", "st-nokeys.test")
    objs: list[tuple[str, dict[str, Any]]] = [
        ("ingressclasses.networking.k8s.io", {  # the manager's; here before a node-only proxy needs it
            "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "nodeagent"},
            "spec": {"controller": "nodeagent.io/ingress-controller"}}),
        ("services", {"apiVersion": "v1", "kind": "Service",
                      "metadata": {"name": "st-web", "namespace": "default"},
                      "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}),
        ("endpointslices.discovery.k8s.io", slice_for("st-web", port, ["127.0.0.2"])),
        ("secrets", secret("st-opaque", "Opaque", {"tls.crt": crt, "tls.key": key})),
        ("secrets", secret("st-nokeys", "Opaque", {"password": b"x"})),
        ("ingresses.networking.k8s.io", {
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "st", "namespace": "default"},
            "spec": {"ingressClassName": "nodeagent",
                     "tls": [{"hosts": ["st-opaque.test"], "secretName": "st-opaque"},
                             {"hosts": ["st-nokeys.test"], "secretName": "st-nokeys"}],
                     "rules": [{"host": h, "http": {"paths": [
                         {"path": "/", "pathType": "Prefix",
                          "backend": {"service": {"name": "st-web", "port": {"name": "http"}}}}]}}
                         for h in hosts]}}),
    ]
    for resource, obj in objs:
        api(lambda c, r=resource, o=obj: c.create(r, o, o["metadata"].get("namespace")))


@pytest.fixture(scope="module", params=["control-plane", "node"])
def proxy(request: pytest.FixtureRequest, server: ServerProcess, objects: None,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, IngressProcess]]:
    """`nodeagent ingress` under the admin credential (it also manages), or a node's (proxy only)."""
    work = tmp_path_factory.mktemp(f"st-{request.param}")
    if request.param == "node":
        kc = node_kubeconfig(server, "st-node", work / "node.kubeconfig")
        ing = start_ingress(server, work / "ing", "--kubeconfig", str(kc), "--no-manage")
    else:
        ing = start_ingress(server, work / "ing")
    yield request.param, ing
    ing.proc.terminate()
    ing.proc.wait(timeout=30)


def test_an_opaque_secrets_keypair_is_served(proxy: tuple[str, IngressProcess]) -> None:
    _, ing = proxy
    assert eventually(lambda: served_cn(ing.https, "st-opaque.test") == "st-opaque.test", timeout=30), \
        ing.log()
    # a Secret without tls.crt/tls.key: its host gets the default certificate
    assert served_cn(ing.https, "st-nokeys.test") == "nodeagent ingress default certificate"


def test_a_secret_without_a_keypair_is_a_warning_event(proxy: tuple[str, IngressProcess],
                                                       api: Callable[..., Any]) -> None:
    who, ing = proxy
    if who == "node":
        pytest.skip("a node's proxy (--no-manage) writes no events: the control plane's does")

    def warned() -> bool:
        events = api(lambda c: c.list("events", "default"))["items"]
        want = 'secret "default/st-nokeys" contains no keypair or CA certificate'
        return any(e.get("reason") == "InvalidSecret" and (e.get("involvedObject") or {}).get("name") == "st"
                   and want in e.get("message", "") for e in events)
    assert eventually(warned, timeout=30), ing.log()
