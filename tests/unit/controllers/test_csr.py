"""The CSR auto-approval and signing rules (csrapproving / csrsigning)."""

import base64
import datetime as dt

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from nodeagent import pki
from nodeagent.controllers import csr as csrs


def _csr(cn="system:node:n1", orgs=("system:nodes",), usages=("digital signature", "client auth"),
         signer=csrs.KUBELET_CLIENT_SIGNER, groups=("system:bootstrappers", "system:authenticated"),
         username="system:bootstrap:abcdef", san=False):
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    b = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs))
    if san:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("evil.example")]), critical=False)
    pem = b.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    return {"metadata": {"name": "c"}, "spec": {"request": base64.b64encode(pem).decode(),
                                                "signerName": signer,
                                                "usages": list(usages), "groups": list(groups),
                                                "username": username}}


def test_bootstrapper_node_client_request_is_auto_approved():
    assert "Auto approving kubelet client" in (csrs.approval(_csr()) or "")


def test_node_renewing_its_own_certificate_is_approved_but_not_someone_elses():
    assert "self" in (csrs.approval(_csr(groups=("system:nodes",), username="system:node:n1")) or "")
    assert csrs.approval(_csr(groups=("system:nodes",), username="system:node:n2")) is None


@pytest.mark.parametrize("kw", [{"orgs": ("system:masters",)}, {"orgs": ("system:nodes", "system:masters")},
                                {"cn": "admin"}, {"cn": "system:node:"}, {"usages": ("server auth",)},
                                {"usages": ("client auth", "cert sign")}, {"signer": csrs.CLIENT_SIGNER},
                                {"groups": ("system:authenticated",), "username": "someone"}, {"san": True}])
def test_anything_else_is_left_for_an_administrator(kw):
    assert csrs.approval(_csr(**kw)) is None


def test_tampered_request_is_not_approved():
    c = _csr()
    pem = bytearray(base64.b64decode(c["spec"]["request"]))
    c["spec"]["request"] = base64.b64encode(bytes(pem[:60]) + b"A" + bytes(pem[61:])).decode()
    assert csrs.approval(c) is None


def test_signed_certificate_is_a_client_cert_from_the_ca(tmp_path):
    ca, key = pki.ensure_ca(tmp_path)
    now = dt.datetime.now(dt.UTC)
    cert = x509.load_pem_x509_certificate(csrs.sign(_csr(), ca, key, now))
    assert cert.issuer == ca.subject
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:n1"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == \
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    ca_key, hash_alg = ca.public_key(), cert.signature_hash_algorithm
    assert isinstance(ca_key, ec.EllipticCurvePublicKey) and hash_alg is not None
    ca_key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(hash_alg))
    assert dt.timedelta(days=364) < cert.not_valid_after_utc - now <= dt.timedelta(days=365)


def test_signer_refuses_bad_usages_and_unknown_signers(tmp_path):
    ca, key = pki.ensure_ca(tmp_path)
    with pytest.raises(csrs.CSRError):
        csrs.sign(_csr(usages=("server auth",)), ca, key)
    with pytest.raises(csrs.CSRError):
        csrs.sign(_csr(signer="example.com/other"), ca, key)
    with pytest.raises(csrs.CSRError):
        csrs.sign(_csr(cn="admin"), ca, key)
