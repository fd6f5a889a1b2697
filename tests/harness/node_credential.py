"""A joined node's credential for tests against a real `nodeagent server`: a client certificate of
system:node:<name> (group system:nodes) signed by the cluster CA, as the kubelet's TLS bootstrap gets one."""

from __future__ import annotations

import base64
import datetime
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodeagent.pki import load_ca
from nodeagent.testing.apiserver import ServerProcess


def node_kubeconfig(server: ServerProcess, node: str, path: Path, form: str = "absolute") -> Path:
    """A kubeconfig of user system:node:<node> (group system:nodes): a client certificate signed by the
    cluster CA, as a joined kubelet's is. `form`: how the kubeconfig holds it, as kubectl reads any of
    them: "absolute" file paths, paths "relative" to the kubeconfig's directory, or "inline" -data fields."""
    pki = server.data_dir / "pki"
    ca_cert, ca_key = load_ca(pki / "ca.crt", pki / "ca.key")
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                                     x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    def b64(b: bytes) -> str:
        return base64.b64encode(b).decode()

    ca_data = b64(server.ca_file.read_bytes())
    crt_file, key_file = path.with_suffix(".crt"), path.with_suffix(".key")
    crt_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    user = {"client-certificate": str(crt_file), "client-key": str(key_file)}
    cluster = {"server": server.url, "certificate-authority-data": ca_data}
    if form == "relative":
        user = {"client-certificate": crt_file.name, "client-key": key_file.name}
        ca_copy = path.with_suffix(".ca.crt")
        ca_copy.write_bytes(server.ca_file.read_bytes())
        cluster = {"server": server.url, "certificate-authority": ca_copy.name}
    elif form == "inline":
        user = {"client-certificate-data": b64(crt_file.read_bytes()),
                "client-key-data": b64(key_file.read_bytes())}
        crt_file.unlink()
        key_file.unlink()
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "node",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "node", "user": user}],
        "contexts": [{"name": "node", "context": {"cluster": "c", "user": "node"}}]}))
    return path
