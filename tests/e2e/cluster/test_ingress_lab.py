"""Ingress in a 3-node netns lab: every node's agent runs the proxy on its own 80/443, the server writes
the statuses. curl with a Host header to each node's address reaches both backend pods; HTTPS with SNI
gets the Secret's certificate (verified with it as the CA); the backend set follows endpoint changes
with no failed request in a bounded request loop; an HTTPRoute's weights split the traffic."""

from __future__ import annotations

import base64
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.pki import self_signed
from tests.e2e.cluster.lab import HTTPD, Lab, start_lab, stop_lab

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

NODES = ("node1", "node2", "node3")
WHOAMI = ["sh", "-c",
          "mkdir -p /tmp/www && hostname > /tmp/www/index.html && exec httpd -f -p 80 -h /tmp/www"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, images: Any) -> Iterator[Lab]:
    lab = start_lab(tmp_path_factory.mktemp("inglab"), images, 3, "host-gw",
                    agent_args=("--ingress-http-port", "80", "--ingress-https-port", "443"))
    try:
        yield lab
    finally:
        stop_lab(lab)


def pod(name: str, node: str, app: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "web", "image": HTTPD, "imagePullPolicy": "Never",
                                     "command": WHOAMI}]}}


def service(name: str, app: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"selector": {"app": app}, "ports": [{"name": "http", "port": 80}]}}


def curl(*args: str) -> tuple[int, str]:
    p = subprocess.run(["curl", "-sS", "-m", "5", "-o", "-", "-w", "\n%{http_code}", *args],
                       capture_output=True, text=True, check=False)
    body, _, code = p.stdout.rpartition("\n")
    return int(code or 0), body.strip()


@pytest.fixture(scope="module")
def web(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pods web-a (node2) and web-b (node3) behind Service web, an Ingress for web.lab with TLS; the
    certificate's path, to verify the served one with."""
    for name, node in (("web-a", "node2"), ("web-b", "node3")):
        lab.apply(pod(name, node, "web"))
    lab.apply(service("web", "web"))
    crt, key = self_signed("web.lab", ("web.lab",))
    ca = tmp_path_factory.mktemp("inglab-tls") / "web.crt"
    ca.write_bytes(crt)
    lab.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
               "metadata": {"name": "web-tls"},
               "data": {"tls.crt": base64.b64encode(crt).decode(),
                        "tls.key": base64.b64encode(key).decode()}})
    lab.apply({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web"},
               "spec": {"tls": [{"hosts": ["web.lab"], "secretName": "web-tls"}],
                        "rules": [{"host": "web.lab", "http": {"paths": [
                            {"path": "/", "pathType": "Prefix",
                             "backend": {"service": {"name": "web", "port": {"name": "http"}}}}]}}]}})
    lab.running("app=web", 2)
    return ca


def test_every_node_routes_by_host_to_both_backends(lab: Lab, web: Path) -> None:
    for node in lab.topo.nodes:
        url = "https://web.lab/"
        resolve = f"web.lab:443:{node.address}"
        lab.wait(f"the ingress on {node.name}",
                 lambda r=resolve: curl("--cacert", str(web), "--resolve", r, "https://web.lab/")[0] == 200,
                 timeout=60)
        seen = Counter(curl("--cacert", str(web), "--resolve", resolve, url)[1] for _ in range(10))
        assert set(seen) == {"web-a", "web-b"}, (node.name, seen)
        # plain HTTP for a TLS host: 308 to https, as ingress-nginx
        assert curl("-H", "Host: web.lab", f"http://{node.address}/x")[0] == 308
        assert curl("-H", "Host: nope.lab", f"http://{node.address}/")[0] == 404


def test_a_tls_secret_of_any_type_is_served_on_every_node(lab: Lab, web: Path,
                                                         tmp_path_factory: pytest.TempPathFactory) -> None:
    """ingress-nginx reads tls.crt/tls.key from the Secret an Ingress names whatever its type: an Opaque one
    is served by every node's proxy, the joined agents' (node credentials) included."""
    crt, key = self_signed("opaque.lab", ("opaque.lab",))
    ca = tmp_path_factory.mktemp("inglab-opaque") / "opaque.crt"
    ca.write_bytes(crt)
    lab.apply({"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": {"name": "opaque-cert"},
               "data": {"tls.crt": base64.b64encode(crt).decode(),
                        "tls.key": base64.b64encode(key).decode()}})
    lab.apply({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "opaque"},
               "spec": {"tls": [{"hosts": ["opaque.lab"], "secretName": "opaque-cert"}],
                        "rules": [{"host": "opaque.lab", "http": {"paths": [
                            {"path": "/", "pathType": "Prefix",
                             "backend": {"service": {"name": "web", "port": {"name": "http"}}}}]}}]}})
    url = "https://opaque.lab/"
    for node in lab.topo.nodes:
        resolve = f"opaque.lab:443:{node.address}"
        lab.wait(f"the Opaque Secret's certificate on {node.name}",
                 lambda r=resolve: curl("--cacert", str(ca), "--resolve", r, url)[0] == 200, timeout=60)


def test_status_lists_every_node(lab: Lab, web: Path) -> None:
    addresses = {n.address for n in lab.topo.nodes}

    def status() -> Any:
        lb = (lab.get("ingress", "web").get("status") or {}).get("loadBalancer", {}).get("ingress") or []
        return {i["ip"] for i in lb} == addresses

    lab.wait("the Ingress's status", status, timeout=30)


def test_endpoint_changes_without_failed_requests(lab: Lab, web: Path) -> None:
    """web-c joins, then web-a leaves the Service (relabelled, still running): a request loop through
    node1 meanwhile sees no failure, and ends on exactly the new set."""
    resolve = f"web.lab:443:{lab.topo.nodes[0].address}"
    args = ("--cacert", str(web), "--resolve", resolve, "https://web.lab/")
    failures: list[tuple[int, str]] = []

    def loop_until(want: set[str], timeout: float = 60) -> float:
        start = time.monotonic()
        recent: list[str] = []
        while time.monotonic() - start < timeout:
            code, body = curl(*args)
            if code != 200:
                failures.append((code, body))
                continue
            recent = (recent + [body])[-12:]
            if len(recent) == 12 and set(recent) == want:
                return time.monotonic() - start
        raise AssertionError(f"traffic never settled on {want}: {recent}")

    lab.apply(pod("web-c", "node1", "web"))
    lab.running("app=web", 3)
    took_add = loop_until({"web-a", "web-b", "web-c"})
    lab.kubectl("label", "pod", "web-a", "app=off", "--overwrite")
    took_remove = loop_until({"web-b", "web-c"})
    print(f"ingress followed the endpoints: added in {took_add:.2f}s, removed in {took_remove:.2f}s "
          "(request loop time, including the API's propagation)")
    assert failures == []


def test_httproute_weights_split_traffic(lab: Lab, web: Path) -> None:
    lab.apply(pod("blue", "node2", "blue"))
    lab.apply(pod("green", "node3", "green"))
    lab.apply(service("blue", "blue"))
    lab.apply(service("green", "green"))
    lab.running("app in (blue,green)", 2)
    gw = "gateway.networking.k8s.io/v1"
    lab.wait("the Gateway API CRDs", lambda: "gateways" in lab.kubectl("api-resources", "--api-group",
                                                                         "gateway.networking.k8s.io"))
    lab.apply({"apiVersion": gw, "kind": "Gateway", "metadata": {"name": "front"},
               "spec": {"gatewayClassName": "nodeagent",
                        "listeners": [{"name": "http", "port": 80, "protocol": "HTTP"}]}})
    lab.apply({"apiVersion": gw, "kind": "HTTPRoute", "metadata": {"name": "bg"},
               "spec": {"parentRefs": [{"name": "front"}], "hostnames": ["bg.lab"],
                        "rules": [{"backendRefs": [{"name": "blue", "port": 80, "weight": 3},
                                                   {"name": "green", "port": 80, "weight": 1}]}]}})
    node = lab.topo.nodes[1].address

    def served() -> bool:
        return curl("-H", "Host: bg.lab", f"http://{node}/")[0] == 200

    lab.wait("the HTTPRoute", served, timeout=60)
    seen = Counter(curl("-H", "Host: bg.lab", f"http://{node}/")[1] for _ in range(100))
    print(f"HTTPRoute 3:1 split over 100 requests: {dict(seen)}")
    assert set(seen) == {"blue", "green"} and 60 <= seen["blue"] <= 90, seen
    g = lab.get("gateway", "front")
    conds = {c["type"]: c["status"] for c in g["status"]["conditions"]}
    assert conds == {"Accepted": "True", "Programmed": "True"}
