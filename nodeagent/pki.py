"""The cluster's PKI primitives, shared by the apiserver (its serving and kubelet-client certs), the CSR
signer and the kubelet (its serving cert): the cluster CA, generated on first use under a pki dir, and
keys and certificates written privately and durably."""

from __future__ import annotations

import datetime as dt
import typing
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPrivateKeyTypes, PrivateKeyTypes
from cryptography.x509.oid import NameOID

from kernel.fs import atomic_write


def write_private(path: Path, data: bytes | str) -> None:
    """Atomically, mode 0600 from the start, durable before it replaces the old file (keys, tokens)."""
    atomic_write(path, data, 0o600)


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """A private key as unencrypted PKCS#8 PEM."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _can_sign(key: PrivateKeyTypes) -> typing.TypeGuard[CertificateIssuerPrivateKeyTypes]:
    """A key of a type that can sign certificates (what x509's builder accepts)."""
    return isinstance(key, typing.get_args(CertificateIssuerPrivateKeyTypes))


def load_ca(crt: Path, key: Path) -> tuple[x509.Certificate, CertificateIssuerPrivateKeyTypes]:
    """The CA certificate and its key from their PEM files (ValueError when unreadable or unfit)."""
    cert = x509.load_pem_x509_certificate(crt.read_bytes())
    ca_key = serialization.load_pem_private_key(key.read_bytes(), None)
    if not _can_sign(ca_key):
        raise ValueError(f"{key}: a {type(ca_key).__name__} cannot sign certificates")
    return cert, ca_key


def ensure_ca(pki: Path) -> tuple[x509.Certificate, CertificateIssuerPrivateKeyTypes]:
    """The cluster CA under `pki` (ca.crt, ca.key), created on first use."""
    crt, key = pki / "ca.crt", pki / "ca.key"
    if crt.exists() and key.exists():
        return load_ca(crt, key)
    pki.mkdir(parents=True, exist_ok=True)
    k = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nodeagent-ca")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(k.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                           critical=True)
            .sign(k, hashes.SHA256()))
    write_private(key, key_pem(k))
    write_private(crt, cert.public_bytes(serialization.Encoding.PEM))
    return cert, k


def self_signed(common_name: str, dns_names: tuple[str, ...] = (), days: int = 3650) -> tuple[bytes, bytes]:
    """A self-signed serving certificate and its key, both PEM (e.g. the ingress's default certificate,
    served to names no Secret covers, as ingress-nginx's fake certificate is)."""
    k = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(k.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(hours=1))
               .not_valid_after(now + dt.timedelta(days=days)))
    if dns_names:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]),
                                        critical=False)
    cert = builder.sign(k, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem(k)


def ensure_sa_keys(pki: Path) -> tuple[PrivateKeyTypes, bytes]:
    """The ServiceAccount token signing key (`sa.key`, RSA 2048 as kubeadm makes it) and its public half
    (`sa.pub`, PEM), created on first use beside the CA so whatever shares the CA shares them too."""
    key, pub = pki / "sa.key", pki / "sa.pub"
    if key.exists():
        k = serialization.load_pem_private_key(key.read_bytes(), None)
    else:
        pki.mkdir(parents=True, exist_ok=True)
        k = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        write_private(key, k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    pem = k.public_key().public_bytes(serialization.Encoding.PEM,
                                      serialization.PublicFormat.SubjectPublicKeyInfo)
    if not pub.exists() or pub.read_bytes() != pem:
        atomic_write(pub, pem, 0o644)
    return k, pem
