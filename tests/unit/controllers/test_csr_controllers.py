"""csrapproving and csrsigning over fake informers: a joining node's request is approved, then signed by the
cluster CA; a request the approver does not recognize waits; without the CA's files nothing is signed."""

import base64
import dataclasses
import datetime as dt

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodeagent import pki
from nodeagent.controllers.csrapproving_controller import CSRApprovingController
from nodeagent.controllers.csrsigning_controller import CSRSigningController
from nodeagent.controllers.options import ControllerOptions
from nodeagent.testing.clock import FakeClock
from tests.unit.controllers.fakes import FakeClient, FakeInformers, FakeRecorder

WALL = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _csr(name, cn, orgs=(), groups=("system:bootstrappers", "system:authenticated")):
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    pem = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs)).sign(key, hashes.SHA256()) \
        .public_bytes(serialization.Encoding.PEM)
    return {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {"request": base64.b64encode(pem).decode(),
                     "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                     "usages": ["digital signature", "client auth"], "groups": list(groups),
                     "username": "system:bootstrap:abcdef"}}


def _setup(tmp_path, with_ca=True):
    inf = FakeInformers()
    client = FakeClient(inf)
    opts = ControllerOptions(clock=FakeClock(WALL.timestamp()))
    if with_ca:
        pki.ensure_ca(tmp_path)
        opts = dataclasses.replace(opts, cluster_signing_cert_file=str(tmp_path / "ca.crt"),
                                   cluster_signing_key_file=str(tmp_path / "ca.key"))
    return inf, client, (CSRApprovingController(client, inf, FakeRecorder(), opts),
                         CSRSigningController(client, inf, FakeRecorder(), opts))


async def _drain(*controllers):
    for _ in range(3):
        for c in controllers:
            while len(c.queue):
                key = await c.queue.get()
                await c.reconcile(key)
                c.queue.done(key)


async def test_a_joining_nodes_request_is_approved_then_signed(tmp_path):
    inf, client, ctls = _setup(tmp_path)
    await client.create("certificatesigningrequests", _csr("node-csr-1", "system:node:n1", ("system:nodes",)))
    await _drain(*ctls)
    got = inf.get("certificatesigningrequests").get("node-csr-1")
    assert [(c["type"], c["reason"], c["lastUpdateTime"]) for c in got["status"]["conditions"]] == \
        [("Approved", "AutoApproved", "2026-01-01T00:00:00Z")]
    cert = x509.load_pem_x509_certificate(base64.b64decode(got["status"]["certificate"]))
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:n1"
    assert cert.issuer == x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes()).subject


async def test_an_unrecognized_request_waits_for_an_administrator(tmp_path):
    inf, client, ctls = _setup(tmp_path)
    alice = _csr("alice", "alice", groups=("system:authenticated",))
    await client.create("certificatesigningrequests", alice)
    await _drain(*ctls)
    assert not inf.get("certificatesigningrequests").get("alice").get("status")


async def test_without_the_ca_files_nothing_is_signed(tmp_path):
    inf, client, ctls = _setup(tmp_path, with_ca=False)
    await client.create("certificatesigningrequests", _csr("node-csr-2", "system:node:n2", ("system:nodes",)))
    await _drain(*ctls)
    st = inf.get("certificatesigningrequests").get("node-csr-2")["status"]
    assert [c["type"] for c in st["conditions"]] == ["Approved"] and "certificate" not in st
