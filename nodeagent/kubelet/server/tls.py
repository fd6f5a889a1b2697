"""The kubelet API's serving certificate and its client CA.

As the kubelet does: a serving cert is signed by the cluster CA when the CA key is at hand (`nodeagent
up`, where the apiserver's PKI is under the same data dir), otherwise it is self-signed
(`<host>@<timestamp>`-style, kept in the kubelet's cert dir and reused). Client certificates are
verified against the cluster CA (the apiserver's `kube-root-ca.crt`), optional so bearer tokens still work.
The certificate is made by `serving_cert`, in a child process where this one has not loaded cryptography
(`nodeagent agent`: see nodeagent/isolated.py).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
from pathlib import Path


def _sans(node_name: str, ips: list[str]) -> tuple[set[str], set[str]]:
    names = {node_name, socket.gethostname(), "localhost"}
    return {i for i in {"127.0.0.1", *ips} if i}, {n for n in names if n}


def ensure_serving_cert(cert_dir: Path, node_name: str, ips: list[str], ca_crt: Path | None = None,
                        ca_key: Path | None = None) -> tuple[Path, Path]:
    """kubelet.crt/kubelet.key under cert_dir: CA-signed when the CA key exists, else self-signed.

    Reused while it still names every wanted address and its issuer is the one we would use now."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    from nodeagent.pki import key_pem, load_ca, write_private

    cert_dir.mkdir(parents=True, exist_ok=True)
    crt, key = cert_dir / "kubelet.crt", cert_dir / "kubelet.key"
    ca = ca_k = None
    if ca_crt is not None and ca_key is not None and ca_crt.exists() and ca_key.exists():
        ca, ca_k = load_ca(ca_crt, ca_key)
    want_ips, want_names = _sans(node_name, ips)
    if crt.exists() and key.exists():
        cur = x509.load_pem_x509_certificate(crt.read_bytes())
        with_issuer = (ca.subject if ca is not None else cur.subject) == cur.issuer
        try:
            san = cur.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            have_ips = {str(i) for i in san.get_values_for_type(x509.IPAddress)}
            have = set(san.get_values_for_type(x509.DNSName))
            if with_issuer and want_ips <= have_ips and want_names <= have and \
                    cur.not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=1):
                return crt, key
        except x509.ExtensionNotFound:
            pass
    k = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME,
                                            f"system:node:{node_name}" if ca is not None
                                            else f"{node_name}@{int(now.timestamp())}")])
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in sorted(want_names)]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in sorted(want_ips)]
    b = (x509.CertificateBuilder().subject_name(subject)
         .issuer_name(ca.subject if ca is not None else subject).public_key(k.public_key())
         .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(hours=1))
         .not_valid_after(now + dt.timedelta(days=365))
         .add_extension(x509.SubjectAlternativeName(sans), critical=False)
         .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True))
    cert = b.sign(ca_k if ca_k is not None else k, hashes.SHA256())
    write_private(key, key_pem(k))
    write_private(crt, cert.public_bytes(serialization.Encoding.PEM))
    return crt, key


def serving_cert(cert_dir: str, node_name: str, ips: list[str], ca_crt: str,
                 ca_key: str) -> tuple[Path, Path]:
    """`ensure_serving_cert`, in a child process unless cryptography is loaded here (blocking)."""
    from nodeagent.isolated import call

    crt, key = call("nodeagent.kubelet.server.tls:_serving_cert_answer", cert_dir, node_name, ips, ca_crt,
                    ca_key)
    return Path(crt), Path(key)


def _serving_cert_answer(cert_dir: str, node_name: str, ips: list[str], ca_crt: str,
                         ca_key: str) -> list[str]:
    return [str(p) for p in ensure_serving_cert(Path(cert_dir), node_name, ips, Path(ca_crt), Path(ca_key))]


def server_context(crt: Path, key: Path, client_ca_pem: str | None) -> ssl.SSLContext:
    """TLS for the kubelet API; client certs are asked for (optional) and checked against the cluster CA."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(crt), str(key))
    ctx.set_alpn_protocols(["http/1.1"])
    if client_ca_pem:
        ctx.load_verify_locations(cadata=client_ca_pem)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx
