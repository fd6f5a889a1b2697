"""`nodeagent agent` against a real server: wrong token, wrong hash, expired token, missing pin are refused
with a clear message and a non-zero exit, leaving no Node, no CSR and no credential behind. No root needed:
a refused join stops before the node components start."""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from nodeagent.api import bootstrap_token as tokens
from nodeagent.testing.apiserver import start_server


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("join-server"))
    yield s
    s.stop()


def _join_words(srv) -> dict[str, str]:
    words = (srv.data_dir / "join-command").read_text().split()
    assert words[:2] == ["nodeagent", "agent"]
    return {words[i][2:]: words[i + 1] for i in range(2, len(words) - 1, 2)}


def _kubectl(srv, *args: str, input: str | None = None) -> str:
    p = subprocess.run(["kubectl", *args], capture_output=True, text=True, env=srv.env(),
                       input=input, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def _agent(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nodeagent", "agent", "--data-dir", str(tmp_path / "node"),
                           "--node-name", "refused-node", *args], capture_output=True, text=True, timeout=120)


def _assert_nothing_left(srv, tmp_path: Path) -> None:
    assert json.loads(_kubectl(srv, "get", "nodes", "-o", "json"))["items"] == []
    assert json.loads(_kubectl(srv, "get", "csr", "-o", "json"))["items"] == []
    node_dir = tmp_path / "node"
    assert not (node_dir / "kubelet.kubeconfig").exists()
    assert not (node_dir / "pki").exists()


def test_join_command_is_printed_and_written(srv):
    j = _join_words(srv)
    assert j["server"] == srv.url
    assert tokens.is_token(j["token"])
    assert j["ca-cert-hash"] == tokens.ca_cert_hash(srv.ca_file.read_bytes())
    assert f"nodeagent agent --server {srv.url} --token {j['token']}" in srv.log()
    secret = json.loads(_kubectl(srv, "get", "secret", "-n", "kube-system",
                                 f"bootstrap-token-{j['token'][:6]}", "-o", "json"))
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    fields = tokens.secret_fields(secret)
    assert fields["usage-bootstrap-authentication"] == "true" and fields["expiration"]


def test_wrong_token_secret_is_refused(srv, tmp_path):
    j = _join_words(srv)
    bad = j["token"][:7] + ("a" if j["token"][7] != "a" else "b") + j["token"][8:]
    p = _agent(tmp_path, "--server", srv.url, "--token", bad, "--ca-cert-hash", j["ca-cert-hash"])
    assert p.returncode == 1, p.stderr
    assert "join refused" in p.stderr and "signature does not verify" in p.stderr
    _assert_nothing_left(srv, tmp_path)


def test_unknown_token_id_is_refused(srv, tmp_path):
    j = _join_words(srv)
    p = _agent(tmp_path, "--server", srv.url, "--token", "zzzzzz.0123456789abcdef", "--ca-cert-hash",
               j["ca-cert-hash"])
    assert p.returncode == 1 and "invalid for this cluster or it has expired" in p.stderr, p.stderr
    _assert_nothing_left(srv, tmp_path)


def test_wrong_ca_hash_is_refused(srv, tmp_path):
    j = _join_words(srv)
    p = _agent(tmp_path, "--server", srv.url, "--token", j["token"], "--ca-cert-hash", "sha256:" + "ab" * 32)
    assert p.returncode == 1 and "matches none of the pinned" in p.stderr, p.stderr
    _assert_nothing_left(srv, tmp_path)


def test_malformed_token_or_hash_and_missing_pin_are_refused(srv, tmp_path):
    j = _join_words(srv)
    p = _agent(tmp_path, "--server", srv.url, "--token", j["token"], "--ca-cert-hash", "md5:abc")
    assert p.returncode == 1 and "invalid --ca-cert-hash" in p.stderr, p.stderr
    p = _agent(tmp_path, "--server", srv.url, "--token", j["token"])
    assert p.returncode == 1 and "--discovery-token-unsafe-skip-ca-verification" in p.stderr, p.stderr
    # a plain bearer token needs the unsafe flag
    p = _agent(tmp_path, "--server", srv.url, "--token", srv.token)
    assert p.returncode == 2 and "not a bootstrap token" in p.stderr, p.stderr
    _assert_nothing_left(srv, tmp_path)


def test_expired_token_is_refused_and_does_not_authenticate(srv, tmp_path):
    token = "expird.0123456789abcdef"
    secret = tokens.token_secret(token, 3600, now=dt.datetime.now(dt.UTC) - dt.timedelta(hours=2))
    _kubectl(srv, "apply", "-f", "-", input=yaml.safe_dump(secret))
    ctx = ssl.create_default_context(cafile=str(srv.ca_file))
    req = urllib.request.Request(srv.url + "/apis/certificates.k8s.io/v1/certificatesigningrequests",
                                 headers={"Authorization": f"Bearer {token}"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, context=ctx, timeout=10)
    assert e.value.code == 401
    j = _join_words(srv)
    p = _agent(tmp_path, "--server", srv.url, "--token", token, "--ca-cert-hash", j["ca-cert-hash"])
    assert p.returncode == 1 and "join refused" in p.stderr, p.stderr
    _assert_nothing_left(srv, tmp_path)


def test_bootstrap_token_may_only_make_csrs_and_anonymous_only_read_cluster_info(srv):
    j = _join_words(srv)
    ctx = ssl.create_default_context(cafile=str(srv.ca_file))

    def get(path: str, token: str | None) -> int:
        req = urllib.request.Request(srv.url + path,
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    assert get("/api/v1/namespaces/kube-public/configmaps/cluster-info", None) == 200
    # anonymous: kube-apiserver's --anonymous-auth answers 403 (system:anonymous), not 401
    assert get("/api/v1/namespaces/kube-system/secrets", None) == 403
    assert get("/api/v1/nodes", None) == 403
    assert get("/apis/certificates.k8s.io/v1/certificatesigningrequests", j["token"]) == 200
    assert get("/api/v1/namespaces/kube-system/secrets", j["token"]) == 403
    assert get("/api/v1/nodes", j["token"]) == 403
    cm = json.loads(_kubectl(srv, "get", "cm", "-n", "kube-public", "cluster-info", "-o", "json"))
    tid, tsecret = tokens.parse_token(j["token"])
    assert tokens.verify_detached(cm["data"][f"jws-kubeconfig-{tid}"], cm["data"]["kubeconfig"], tid, tsecret)
    ca = yaml.safe_load(cm["data"]["kubeconfig"])["clusters"][0]["cluster"]["certificate-authority-data"]
    assert base64.b64decode(ca) == srv.ca_file.read_bytes()
