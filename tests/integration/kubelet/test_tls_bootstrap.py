"""The join itself against a real server, without the node components (no root): the credential it writes
is the node's own identity under NodeRestriction, a restart reuses it, and requests the approver does not
recognize wait for `kubectl certificate approve`."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodeagent.client.rest import Client, ClientError
from nodeagent.kubelet.tls_bootstrap import join
from nodeagent.testing.apiserver import start_server


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = start_server(tmp_path_factory.mktemp("join-flow"))
    yield s
    s.stop()


def _join_words(srv) -> dict[str, str]:
    words = (srv.data_dir / "join-command").read_text().split()
    return {words[i][2:]: words[i + 1] for i in range(2, len(words) - 1, 2)}


def _kubectl(srv, *args: str, input: str | None = None) -> str:
    p = subprocess.run(["kubectl", *args], capture_output=True, text=True, env=srv.env(),
                       input=input, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


def _csr_names(srv) -> list[str]:
    return [c["metadata"]["name"] for c in json.loads(_kubectl(srv, "get", "csr", "-o", "json"))["items"]]


def test_joined_credential_is_the_node_under_node_restriction_and_is_reused(srv, tmp_path):
    j = _join_words(srv)
    before = set(_csr_names(srv))
    path = asyncio.run(join(j["server"], j["token"], [j["ca-cert-hash"]], "flow-node", tmp_path))
    new = set(_csr_names(srv)) - before
    assert len(new) == 1
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    key = yaml.safe_load(path.read_text())["users"][0]["user"]["client-key"]
    assert oct((tmp_path / "pki" / "kubelet-client.key").stat().st_mode & 0o777) == "0o600" and key

    async def as_node() -> None:
        async with Client.from_kubeconfig(path) as c:
            await c.create("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "flow-node"}})
            await c.patch("nodes", "flow-node", {"metadata": {"labels": {"joined": "yes"}}})
            # reads are allowed
            assert (await c.get("namespaces", "default"))["metadata"]["name"] == "default"
            with pytest.raises(ClientError) as e:
                await c.create("nodes",
                               {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "flow-other"}})
            assert e.value.code == 403 and 'node "flow-node" is not allowed to modify node' in e.value.message
            with pytest.raises(ClientError) as e:
                await c.create("namespaces",
                               {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}})
            assert e.value.code == 403
            await c.delete("nodes", "flow-node")

    asyncio.run(as_node())
    # a restart finds its credential and does not ask again
    assert asyncio.run(join(j["server"], j["token"], [j["ca-cert-hash"]], "flow-node", tmp_path)) == path
    assert set(_csr_names(srv)) - before == new
    _kubectl(srv, "delete", "csr", *new)


def test_unrecognized_request_waits_for_kubectl_certificate_approve(srv):
    key = ec.generate_private_key(ec.SECP256R1())
    req = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "alice")]))
           .sign(key, hashes.SHA256()))
    pem = req.public_bytes(serialization.Encoding.PEM)
    _kubectl(srv, "apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": "alice"},
        "spec": {"request": base64.b64encode(pem).decode(),
                 "signerName": "kubernetes.io/kube-apiserver-client",
                 "usages": ["digital signature", "client auth"], "expirationSeconds": 3600}}))
    try:
        csr = json.loads(_kubectl(srv, "get", "csr", "alice", "-o", "json"))
        assert csr["spec"]["username"] == "admin" and not (csr.get("status") or {}).get("certificate")
        _kubectl(srv, "certificate", "approve", "alice")
        for _ in range(100):
            csr = json.loads(_kubectl(srv, "get", "csr", "alice", "-o", "json"))
            if (csr.get("status") or {}).get("certificate"):
                break
            subprocess.run(["sleep", "0.2"])
        cert = x509.load_pem_x509_certificate(base64.b64decode(csr["status"]["certificate"]))
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "alice"
        assert [c["type"] for c in csr["status"]["conditions"]] == ["Approved"]
    finally:
        _kubectl(srv, "delete", "csr", "alice")


def test_token_create_prints_a_join_command_that_joins_and_delete_revokes_it(srv, tmp_path):
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "nodeagent", "token", "--kubeconfig",
                               str(srv.kubeconfig),
                               *args], capture_output=True, text=True, timeout=60)

    p = cli("create", "--ttl", "600", "--description", "for a test")
    assert p.returncode == 0, p.stderr
    words = p.stdout.split()
    j = {words[i][2:]: words[i + 1] for i in range(2, len(words) - 1, 2)}
    assert j["server"] == srv.url and j["ca-cert-hash"] == _join_words(srv)["ca-cert-hash"]
    assert j["token"] != _join_words(srv)["token"]
    listed = cli("list")
    assert j["token"][:6] + ".<secret>" in listed.stdout and "for a test" in listed.stdout, listed.stdout
    before = set(_csr_names(srv))
    path = asyncio.run(join(j["server"], j["token"], [j["ca-cert-hash"]], "token-node", tmp_path / "a"))
    assert path.exists()
    _kubectl(srv, "delete", "csr", *(set(_csr_names(srv)) - before))
    assert cli("delete", j["token"]).returncode == 0
    p = subprocess.run([sys.executable, "-m", "nodeagent", "agent", "--data-dir", str(tmp_path / "b"),
                        "--node-name",
                        "token-node-2", "--server", j["server"], "--token", j["token"], "--ca-cert-hash",
                        j["ca-cert-hash"]], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "join refused" in p.stderr, p.stderr
    assert not (tmp_path / "b" / "kubelet.kubeconfig").exists()


def test_unsafe_skip_ca_verification_joins_without_a_pin(srv, tmp_path):
    j = _join_words(srv)
    before = set(_csr_names(srv))
    path = asyncio.run(join(j["server"], j["token"], [], "unpinned-node", tmp_path,
                            unsafe_skip_ca_verification=True))
    cluster = yaml.safe_load(path.read_text())["clusters"][0]["cluster"]
    ca = base64.b64decode(cluster["certificate-authority-data"])
    assert ca == srv.ca_file.read_bytes()
    _kubectl(srv, "delete", "csr", *(set(_csr_names(srv)) - before))
