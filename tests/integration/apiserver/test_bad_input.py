"""Bad input gets the right Status and stores nothing."""

from __future__ import annotations

import pytest

from nodeagent.apiserver.auth import issue_node_token
from tests.integration.apiserver.http import call

CM = "/api/v1/namespaces/default/configmaps"


def names(server) -> list[str]:
    code, body = call(server, "GET", CM)
    assert code == 200
    return [i["metadata"]["name"] for i in body["items"]]


def assert_status(body, code: int, reason: str) -> None:
    assert body["kind"] == "Status" and body["status"] == "Failure", body
    assert body["code"] == code and body["reason"] == reason, body


@pytest.mark.parametrize("body,ctype,code,reason", [
    ('{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x1"', "application/json", 400,
     "BadRequest"),
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [x2", "application/yaml", 400, "BadRequest"),
    ('{"apiVersion": "apps/v1", "kind": "ConfigMap", "metadata": {"name": "x3"}}', "application/json", 400,
     "BadRequest"),
    ('{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x4"}}', "application/json", 400,
     "BadRequest"),
    ('{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "X_5"}}', "application/json",
     422, "Invalid"),
    ('{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x6", "labels": {"a": "b c"}}}',
     "application/json", 422, "Invalid"),
    ('{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}', "application/json", 422, "Invalid"),
    ("garbage", "application/x-foo", 415, "UnsupportedMediaType"),
])
def test_rejected_and_nothing_stored(server, body, ctype, code, reason):
    before = names(server)
    got, status = call(server, "POST", CM, body, content_type=ctype)
    assert got == code, status
    assert_status(status, code, reason)
    assert names(server) == before


def test_invalid_has_field_causes(server):
    code, st = call(server, "POST", "/api/v1/namespaces/default/pods",
                    {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                     "spec": {"containers": [{"name": "c"}]}})
    assert code == 422
    required = {"reason": "FieldValueRequired", "message": "Required value",
                "field": "spec.containers[0].image"}
    assert required in st["details"]["causes"]
    assert st["details"]["kind"] == "Pod" and st["details"]["name"] == "p"


def test_oversized_body_is_413(server):
    big = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
           "data": {"a": "x" * (4 << 20)}}
    code, st = call(server, "POST", CM, big)
    assert code == 413
    assert_status(st, 413, "RequestEntityTooLarge")
    assert "big" not in names(server)


def test_a_body_arriving_in_pieces_is_read_whole(server):
    """A request body that reaches the server in several TCP segments (kubectl apply's larger objects
    do) is read to its Content-Length, not to the first segment."""
    import json
    import socket
    import ssl
    import time

    body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pieces"},
                       "data": {"k": "v" * 20000}}).encode()
    ctx = ssl.create_default_context(cafile=str(server.ca_file))
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as raw, \
            ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(f"POST {CM} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {server.token}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                    "Connection: close\r\n\r\n".encode())
        for i in range(0, len(body), 4096):
            tls.sendall(body[i:i + 4096])
            time.sleep(0.02)
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 201"), answer[:300]
    assert "pieces" in names(server)


def test_unknown_namespace_is_404(server):
    code, st = call(server, "POST", "/api/v1/namespaces/nope/configmaps",
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
    assert code == 404
    assert st["message"] == 'namespaces "nope" not found'


def test_wrong_token_is_401_and_no_token_is_anonymous(server):
    code, st = call(server, "GET", CM, token="not-a-token")
    assert code == 401
    assert_status(st, 401, "Unauthorized")
    code, st = call(server, "GET", CM, token=None)  # kube's --anonymous-auth: 403 as system:anonymous
    assert code == 403
    assert st["message"] == ('configmaps is forbidden: User "system:anonymous" cannot list resource '
                             '"configmaps" in API group "" in the namespace "default"')


def test_node_credentials_are_restricted(server):
    tok_a = issue_node_token(server.data_dir, "node-a")
    issue_node_token(server.data_dir, "node-b")
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}}
    code, _ = call(server, "POST", "/api/v1/nodes", node, token=tok_a)
    assert code == 201
    code, st = call(server, "POST", "/api/v1/nodes", {**node, "metadata": {"name": "node-b"}}, token=tok_a)
    assert code == 403
    assert_status(st, 403, "Forbidden")
    code, _ = call(server, "GET", "/api/v1/nodes/node-b", token=tok_a)
    assert code == 404  # reads are allowed; node-b does not exist: nothing was stored
    # pods: only the status of pods bound to this node
    for name, bound in (("pa", "node-a"), ("pb", "node-b")):
        code, _ = call(server, "POST", "/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": bound, "containers": [{"name": "c", "image": "busybox"}]}})
        assert code == 201
    patch = {"status": {"phase": "Running"}}
    code, _ = call(server, "PATCH", "/api/v1/namespaces/default/pods/pa/status", patch, token=tok_a,
                   content_type="application/merge-patch+json")
    assert code == 200
    code, st = call(server, "PATCH", "/api/v1/namespaces/default/pods/pb/status", patch, token=tok_a,
                    content_type="application/merge-patch+json")
    assert code == 403
    code, pb = call(server, "GET", "/api/v1/namespaces/default/pods/pb")
    assert pb["status"]["phase"] == "Pending"
    code, _ = call(server, "POST", CM, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "n"}},
                   token=tok_a)
    assert code == 403
    for p in ("pa", "pb"):
        call(server, "DELETE", f"/api/v1/namespaces/default/pods/{p}?gracePeriodSeconds=0")
    call(server, "DELETE", "/api/v1/nodes/node-a")


def test_discovery_and_openapi(server):
    code, body = call(server, "GET", "/openapi/v2", headers={"Accept": "application/json"})
    assert code == 200 and body["swagger"] == "2.0" and "io.k8s.api.core.v1.Pod" in body["definitions"]
    code, v = call(server, "GET", "/version/", token=None)
    assert code == 200 and v["major"] == "1"
    code, rl = call(server, "GET", "/api/v1")
    pods = next(r for r in rl["resources"] if r["name"] == "pods")
    assert "watch" in pods["verbs"] and pods["shortNames"] == ["po"]
    ev = next(r for r in rl["resources"] if r["name"] == "pods/eviction")
    assert (ev["group"], ev["version"], ev["kind"]) == ("policy", "v1", "Eviction")
    code, st = call(server, "GET", "/api/v1/nosuchthings")
    assert code == 404 and st["reason"] == "NotFound"


def test_metrics_count_requests(server):
    call(server, "GET", "/api/v1/namespaces/default/configmaps")
    code, text = call(server, "GET", "/metrics")
    assert code == 200
    listed = b'apiserver_request_total{code="200",group="",resource="configmaps",subresource="",verb="list"}'
    assert listed in text
    code, st = call(server, "GET", "/metrics", token=None)
    assert code == 403 and st["message"] == 'forbidden: User "system:anonymous" cannot get path "/metrics"'
