"""--max-requests-inflight / --max-mutating-requests-inflight on a real server, with the real clients.

A request whose body is still being sent holds its slot (the limit is taken after authentication,
before the body is read, as kube-apiserver's filter is), so a raw TLS connection that sends headers
and half a body fills a pool of one deterministically. Then: the Python client sees kube's 429 with
Retry-After 1 and kube's plain-text body; kubectl (client-go) retries on its own and succeeds once
the slot frees; reads, watches and system:masters are not held back.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from nodeagent.apiserver.auth import TokenFile
from nodeagent.testing.apiserver import start_server
from tests.integration.apiserver.conftest import KUBECTL_120, KUBECTL_132

USER = "inflight-user"


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("inflight"), "sqlite",
                       extra=["--max-requests-inflight", "1", "--max-mutating-requests-inflight", "1",
                              # no embedded client competes for the one slot: the test's requests alone
                              *[f"--without={c}" for c in ("scheduler", "controllers", "ingress",
                                                           "podnetwork")]],
                       timeout=90)  # a loaded 2-core host can take half a minute to import the server
    # the server issues its components' tokens into the same file after the admin kubeconfig: a token issued
    # here meanwhile was lost to its read-modify-write (the user then 401, the held write never held a slot)
    deadline = time.monotonic() + 60
    components = ("scheduler", "controller-manager", "coredns", "ingress")
    while not all((srv.data_dir / f"{c}.kubeconfig").exists() for c in components):
        assert time.monotonic() < deadline, "the server never wrote its components' kubeconfigs"
        time.sleep(0.05)
    token = TokenFile(srv.data_dir / "tokens.csv").issue(USER, ())
    admin = api(srv, srv.token)
    rbac = kubernetes.client
    kubernetes.client.RbacAuthorizationV1Api(admin).create_cluster_role_binding(rbac.V1ClusterRoleBinding(
        metadata=rbac.V1ObjectMeta(name="inflight-user-admin"),
        role_ref=rbac.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole",
                                name="cluster-admin"),
        subjects=[rbac.RbacV1Subject(kind="User", name=USER, api_group="rbac.authorization.k8s.io")]))
    yield srv, token
    rc = srv.stop()
    assert rc == 0, srv.log()


def api(srv, token: str) -> kubernetes.client.ApiClient:
    cfg = kubernetes.client.Configuration()
    cfg.host = srv.url
    cfg.ssl_ca_cert = str(srv.ca_file)
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return kubernetes.client.ApiClient(cfg)


class HeldWrite:
    """A ConfigMap create whose body is half sent: it holds a mutating slot until `finish()`."""

    def __init__(self, srv, token: str, name: str) -> None:
        body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}).encode()
        ctx = ssl.create_default_context(cafile=str(srv.ca_file))
        ctx.check_hostname = False
        self.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", srv.port), timeout=30))
        head = (f"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.sock.sendall(head + body[:5])
        self.rest = body[5:]

    def finish(self) -> str:
        self.sock.sendall(self.rest)
        answer = self.sock.recv(65536).decode(errors="replace")
        self.sock.close()
        return answer.split("\r\n", 1)[0]


def metrics(srv) -> str:
    """The server's /metrics, read as system:masters (always served, whatever the limits)."""
    ctx = ssl.create_default_context(cafile=str(srv.ca_file))
    ctx.check_hostname = False
    req = urllib.request.Request(f"{srv.url}/metrics", headers={"Authorization": f"Bearer {srv.token}"})
    with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
        return r.read().decode()


def metric(srv, name: str, kind: str) -> float:
    prefix = f'{name}{{request_kind="{kind}"}} '
    return next((float(ln[len(prefix):]) for ln in metrics(srv).splitlines() if ln.startswith(prefix)), 0.0)


def hold(srv, token: str, name: str) -> HeldWrite:
    held = HeldWrite(srv, token, name)
    deadline = time.monotonic() + 30  # a loaded host (load 14) took more than 10 s to get this far
    while metric(srv, "apiserver_current_inflight_requests", "mutating") < 1:
        assert time.monotonic() < deadline, "the half-sent write never took its slot"
        time.sleep(0.05)
    held.sock.setblocking(False)
    with pytest.raises(ssl.SSLWantReadError):  # no answer yet: it holds the slot, it was not refused
        held.sock.recv(1)
    held.sock.setblocking(True)
    return held


def configmap(name: str) -> kubernetes.client.V1ConfigMap:
    return kubernetes.client.V1ConfigMap(metadata=kubernetes.client.V1ObjectMeta(name=name))


def test_python_client_gets_429_then_succeeds_after_retry(limited):
    srv, token = limited
    core = kubernetes.client.CoreV1Api(api(srv, token))
    held = hold(srv, token, "held-py")
    try:
        with pytest.raises(kubernetes.client.ApiException) as e:
            core.create_namespaced_config_map("default", configmap("py-refused"))
        assert e.value.status == 429
        assert e.value.headers is not None and e.value.headers["Retry-After"] == "1"
        # kube's max-in-flight filter answers in plain text (Go's http.Error), not with a Status
        assert e.value.body == "Too many requests, please try again later.\n"
        assert e.value.headers["Content-Type"] == "text/plain; charset=utf-8"
        # the other pool, a watch and a super-user are not held back
        ns = core.read_namespace("default")
        assert ns.metadata is not None and ns.metadata.name == "default"
        w: Any = core.list_namespaced_config_map("default", watch=True, timeout_seconds=1,
                                                 _preload_content=False)
        assert w.status == 200
        w.release_conn()
        admin = kubernetes.client.CoreV1Api(api(srv, srv.token))
        admin.create_namespaced_config_map("default", configmap("py-by-admin"))
    finally:
        assert held.finish().startswith("HTTP/1.1 201")
    time.sleep(1)  # Retry-After
    core.create_namespaced_config_map("default", configmap("py-refused"))
    got = core.read_namespaced_config_map("py-refused", "default")
    assert got.metadata is not None and got.metadata.name == "py-refused"
    assert metric(srv, "apiserver_dropped_requests_total", "mutating") >= 1


@pytest.mark.parametrize("version", ["1.32", "1.20"])
def test_kubectl_retries_429_and_succeeds(limited, tmp_path, version):
    srv, token = limited
    binary = KUBECTL_132 if version == "1.32" else KUBECTL_120
    if not Path(binary).exists():
        pytest.skip(f"kubectl {version} not found at {binary} (run make install)")
    cfg = yaml.safe_load(srv.kubeconfig.read_text())
    cfg["users"][0]["user"] = {"token": token}
    kc = tmp_path / "user.kubeconfig"
    kc.write_text(yaml.safe_dump(cfg))
    name = f"kubectl-{version.replace('.', '-')}"
    held = hold(srv, token, f"held-{name}")
    out: dict[str, subprocess.CompletedProcess] = {}

    def run() -> None:
        out["p"] = subprocess.run([binary, "-v=6", "create", "configmap", name, "-n", "default"],
                                  capture_output=True, text=True, timeout=60,
                                  env={**srv.env(), "KUBECONFIG": str(kc)})

    dropped = metric(srv, "apiserver_dropped_requests_total", "mutating")
    t = threading.Thread(target=run)
    t.start()
    try:
        deadline = time.monotonic() + 60
        while metric(srv, "apiserver_dropped_requests_total", "mutating") <= dropped:  # kubectl refused
            assert t.is_alive() and time.monotonic() < deadline, out.get("p")
            time.sleep(0.1)
        time.sleep(1.5)  # it waits the Retry-After second and meets the full pool again
        assert t.is_alive(), out.get("p")
    finally:
        assert held.finish().startswith("HTTP/1.1 201")
        t.join(60)
    p = out["p"]
    posts = [ln for ln in p.stderr.splitlines() if "POST" in ln and "/configmaps" in ln]
    assert p.returncode == 0, p.stderr
    assert f"configmap/{name} created" in p.stdout
    assert any("429 Too Many Requests" in ln for ln in posts), posts
    assert "201 Created" in posts[-1], posts
