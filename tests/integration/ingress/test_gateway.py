"""Gateway API through `nodeagent ingress`'s HAProxy: the server installs the CRDs, a Gateway of class
`nodeagent` gets Accepted/Programmed with the node's address, an HTTPRoute's weighted backendRefs split
real traffic about as asked, a header match picks its rule, and an invalid backendRef answers 500 with
ResolvedRefs False."""

from __future__ import annotations

import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nodeagent.client.rest import ClientError
from nodeagent.testing.apiserver import ServerProcess
from tests.integration.ingress.conftest import Backend, IngressProcess, eventually, start_ingress
from tests.integration.ingress.test_ingress import curl, slice_for

pytestmark = pytest.mark.e2e

GW = "gateway.networking.k8s.io/v1"


@pytest.fixture(scope="module")
def gateway_ingress(server: ServerProcess, api: Callable[..., Any], backends: tuple[int, list[Backend]],
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[IngressProcess]:
    port, _ = backends

    def served() -> bool:
        try:
            api(lambda c: c.request("GET", "/apis/gateway.networking.k8s.io/v1"))
        except ClientError:
            return False
        return True

    assert eventually(served, timeout=30), "the server did not install the Gateway API CRDs"
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gw"}}
    api(lambda c: c.create("namespaces", ns))
    objs: list[tuple[str, dict[str, Any]]] = [
        ("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gw-node"}}),
    ]
    for svc, addr in (("heavy", "127.0.0.2"), ("light", "127.0.0.3"), ("canary", "127.0.0.4")):
        objs.append(("services", {"apiVersion": "v1", "kind": "Service",
                                  "metadata": {"name": svc, "namespace": "gw"},
                                  "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}))
        sl = slice_for(svc, port, [addr])
        sl["metadata"]["namespace"] = "gw"
        objs.append(("endpointslices.discovery.k8s.io", sl))
    objs.append((f"{GW}/gateways", {
        "apiVersion": GW, "kind": "Gateway", "metadata": {"name": "front", "namespace": "gw"},
        "spec": {"gatewayClassName": "nodeagent",
                 "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}}))
    objs.append((f"{GW}/httproutes", {
        "apiVersion": GW, "kind": "HTTPRoute", "metadata": {"name": "split", "namespace": "gw"},
        "spec": {"parentRefs": [{"name": "front"}], "hostnames": ["split.test"],
                 "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"},
                                         "headers": [{"name": "x-canary", "value": "yes"}]}],
                            "backendRefs": [{"name": "canary", "port": 80}]},
                           {"backendRefs": [{"name": "heavy", "port": 80, "weight": 80},
                                            {"name": "light", "port": 80, "weight": 20}]},
                           {"matches": [{"path": {"type": "Exact", "value": "/broken"}}],
                            "backendRefs": [{"name": "nowhere", "port": 80}]},
                           {"matches": [{"path": {"type": "PathPrefix", "value": "/mod"}}],
                            "filters": [{"type": "RequestHeaderModifier", "requestHeaderModifier": {
                                "set": [{"name": "X-Set", "value": "from-route"}], "remove": ["X-Gone"]}}],
                            "backendRefs": [{"name": "heavy", "port": 80}]},
                           {"matches": [{"path": {"type": "PathPrefix", "value": "/old"}}],
                            "filters": [{"type": "RequestRedirect", "requestRedirect": {
                                "hostname": "new.test", "statusCode": 301}}]}]}}))
    for resource, obj in objs:
        api(lambda c, r=resource, o=obj: c.create(r, o, o["metadata"].get("namespace")))
    api(lambda c: c.patch("nodes", "gw-node", {"status": {"addresses": [
        {"type": "InternalIP", "address": "127.0.0.1"}]}}, subresource="status"))
    ing = start_ingress(server, tmp_path_factory.mktemp("gw"))
    yield ing
    ing.proc.terminate()
    ing.proc.wait(timeout=30)


def test_gateway_and_route_statuses(gateway_ingress: IngressProcess, api: Callable[..., Any]) -> None:
    def gateway_programmed() -> Any:
        g = api(lambda c: c.get(f"{GW}/gateways", "front", "gw"))
        st = g.get("status") or {}
        ok = {c["type"]: c["status"] for c in st.get("conditions") or []}
        return st if ok.get("Programmed") == "True" and ok.get("Accepted") == "True" else None

    st = eventually(gateway_programmed)
    assert st, api(lambda c: c.get(f"{GW}/gateways", "front", "gw")).get("status")
    assert {"type": "IPAddress", "value": "127.0.0.1"} in st["addresses"]
    assert st["listeners"][0]["attachedRoutes"] == 1
    gc = api(lambda c: c.get(f"{GW}/gatewayclasses", "nodeagent"))
    assert gc["spec"]["controllerName"] == "nodeagent.io/gateway-controller"

    def route_parent() -> Any:
        r = api(lambda c: c.get(f"{GW}/httproutes", "split", "gw"))
        return ((r.get("status") or {}).get("parents") or [None])[0]

    parent = eventually(route_parent)
    got = {c["type"]: (c["status"], c["reason"]) for c in parent["conditions"]}
    assert got == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("False", "BackendNotFound")}


def test_weights_split_traffic_about_as_asked(gateway_ingress: IngressProcess) -> None:
    url = f"http://127.0.0.1:{gateway_ingress.http}/w"
    assert eventually(lambda: curl("-H", "Host: split.test", url)[0] == 200)
    seen: Counter[str] = Counter()
    for _ in range(200):
        code, body, _ = curl("-H", "Host: split.test", url)
        assert code == 200, body
        seen[body.split()[0]] += 1
    # 80:20 asked; a smooth weighted round robin gives it exactly over 200 requests, allow a little drift
    assert set(seen) == {"pod2", "pod3"}
    assert 140 <= seen["pod2"] <= 180, seen


def test_filters_change_headers_and_redirect(gateway_ingress: IngressProcess) -> None:
    base = f"http://127.0.0.1:{gateway_ingress.http}"
    p = subprocess.run(["curl", "-sS", "-m", "5", "-D", "-", "-o", "/dev/null", "-H", "Host: split.test",
                        "-H", "X-Gone: yes", f"{base}/mod/x"], capture_output=True, text=True, check=False)
    assert "x-seen: set=from-route gone=None" in p.stdout, p.stdout  # HAProxy sends names lower case
    p = subprocess.run(["curl", "-sS", "-m", "5", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}",
                        "-H", "Host: split.test", f"{base}/old/page?q=1"],
                       capture_output=True, text=True, check=False)
    assert p.stdout == "301 http://new.test/old/page?q=1"


def test_header_match_and_invalid_backend(gateway_ingress: IngressProcess) -> None:
    base = f"http://127.0.0.1:{gateway_ingress.http}"
    code, body, _ = curl("-H", "Host: split.test", "-H", "X-Canary: yes", f"{base}/w")
    assert (code, body.split()[0]) == (200, "pod4")
    assert curl("-H", "Host: split.test", f"{base}/broken")[0] == 500
    assert curl("-H", "Host: other.test", f"{base}/w")[0] == 404
