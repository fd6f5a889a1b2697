"""The node's side of joining (kubeadm's token discovery + the kubelet's TLS bootstrap, as with
`--bootstrap-kubeconfig`).

1. Discovery: fetch kube-public/cluster-info without trusting the server's certificate, check its
   `jws-kubeconfig-<id>` signature with the token (the server knows the token), check the CA it carries
   against the pinned `--ca-cert-hash` (the CA is the one we expect), then fetch it again over TLS
   verified by that CA (the server holds that CA's serving certificate).
2. TLS bootstrap: as `system:bootstrap:<id>`, create a CertificateSigningRequest for CN=system:node:<name>,
   O=system:nodes (signer kubernetes.io/kube-apiserver-client-kubelet), wait for the certificate.
3. Write the key, certificate and a kubeconfig naming them: from then on the node is itself.

Every refusal raises JoinRefused before anything is written; a CSR this join created is deleted when
the join fails after creating it.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
import secrets
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from kernel.fs import atomic_write
from nodeagent.api import bootstrap_token as tokens
from nodeagent.api.certificates import KUBELET_CLIENT_SIGNER, NODE_PREFIX, NODES_GROUP
from nodeagent.client.rest import Client, ClientError
from nodeagent.clock import REAL_CLOCK, Clock, utcnow

log = logging.getLogger("nodeagent.kubelet.tls_bootstrap")
CLUSTER_INFO = "/api/v1/namespaces/kube-public/configmaps/cluster-info"
CSRS = "certificates.k8s.io/v1/certificatesigningrequests"
KUBECONFIG = "kubelet.kubeconfig"


class JoinRefused(Exception):
    """The join cannot proceed (wrong token, wrong CA hash, expired token, denied CSR, unreachable server)."""


def kubeconfig_path(data_dir: str | Path) -> Path:
    return Path(data_dir) / KUBECONFIG


async def _fetch_cluster_info(server: str, ssl_ctx: Any) -> dict[str, Any]:
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as s, \
                s.get(server.rstrip("/") + CLUSTER_INFO, ssl=ssl_ctx) as r:
            if r.status == 404:
                raise JoinRefused(f"{server} has no kube-public/cluster-info ConfigMap: it is "
                                  "not a nodeagent server with the join flow")
            if r.status >= 400:
                raise JoinRefused(f"{server} refused to show kube-public/cluster-info (HTTP {r.status})")
            return await r.json()
    except (aiohttp.ClientError, TimeoutError, OSError) as e:
        raise JoinRefused(f"cannot fetch cluster-info from {server}: {e}") from None


def _ca_from(kubeconfig_text: str) -> tuple[str, bytes]:
    try:
        cfg = yaml.safe_load(kubeconfig_text)
        cluster = cfg["clusters"][0]["cluster"]
        return cluster["server"], base64.b64decode(cluster["certificate-authority-data"])
    except (yaml.YAMLError, KeyError, IndexError, TypeError, ValueError) as e:
        raise JoinRefused(f"cluster-info carries no usable kubeconfig: {e}") from None


async def discover(server: str, token: str, ca_hashes: list[str], unsafe_skip_ca_verification: bool) -> bytes:
    """The cluster CA (PEM), trusted through the token's signature and the pinned hash."""
    import ssl

    tid, tsecret = tokens.parse_token(token)
    pins = [tokens.parse_hash(h) for h in ca_hashes]
    if not pins and not unsafe_skip_ca_verification:
        raise JoinRefused("no --ca-cert-hash given: pin the cluster CA with the hash the server "
                          "printed, or pass --discovery-token-unsafe-skip-ca-verification to trust any CA")
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    cm = await _fetch_cluster_info(server, insecure)
    data = cm.get("data") or {}
    content = data.get("kubeconfig")
    if not content:
        raise JoinRefused("cluster-info has no kubeconfig")
    signature = data.get(tokens.JWS_PREFIX + tid)
    if signature is None:
        raise JoinRefused(f"token id {tid!r} is invalid for this cluster or it has expired "
                          "(cluster-info has no signature for it): `nodeagent token create` on the server "
                          "prints a new join command")
    if not tokens.verify_detached(signature, content, tid, tsecret):
        raise JoinRefused("the cluster-info signature does not verify with this token: wrong token, "
                          "or the server is not the one that issued it; refusing to trust it")
    _, ca_pem = _ca_from(content)
    try:
        have = tokens.ca_cert_hash(ca_pem)
    except ValueError as e:
        raise JoinRefused(f"cluster-info's CA is not a certificate: {e}") from None
    if pins and have not in pins:
        raise JoinRefused(f"the cluster CA's public key hash {have} matches none of the pinned "
                          f"--ca-cert-hash values ({', '.join(pins)}): refusing to join")
    if not pins:
        log.warning("join: CA %s NOT verified (--discovery-token-unsafe-skip-ca-verification)", have)
    pinned = ssl.create_default_context(cadata=ca_pem.decode())
    pinned.check_hostname = False  # the server URL may be any address of it; the pinned CA is the trust
    again = await _fetch_cluster_info(server, pinned)
    if (again.get("data") or {}).get("kubeconfig") != content:
        raise JoinRefused("cluster-info changed between the insecure and the CA-verified fetch: "
                          "refusing to join")
    return ca_pem


def _new_key_and_request(node_name: str) -> tuple[bytes, bytes]:
    from cryptography import x509  # here, not at the top: `agent` joins in a child (`join_in_child`)
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from nodeagent.pki import key_pem as pkcs8_pem

    key = ec.generate_private_key(ec.SECP256R1())
    req = (x509.CertificateSigningRequestBuilder()
           .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, NODES_GROUP),
                                    x509.NameAttribute(NameOID.COMMON_NAME, NODE_PREFIX + node_name)]))
           .sign(key, hashes.SHA256()))
    return pkcs8_pem(key), req.public_bytes(serialization.Encoding.PEM)


def _conditions(csr: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c.get("type", ""): c for c in (csr.get("status") or {}).get("conditions") or []}


async def request_certificate(client: Client, node_name: str, wait_s: float,
                              clock: Clock = REAL_CLOCK) -> tuple[bytes, bytes]:
    """(key PEM, certificate PEM) for system:node:<node_name>, through an auto-approved CSR."""
    key_pem, req_pem = await asyncio.to_thread(_new_key_and_request, node_name)
    name = f"node-csr-{secrets.token_hex(8)}"
    body = {"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
            "metadata": {"name": name},
            "spec": {"request": base64.b64encode(req_pem).decode(), "signerName": KUBELET_CLIENT_SIGNER,
                     "usages": ["digital signature", "client auth"]}}
    try:
        await client.create(CSRS, body)
    except ClientError as e:
        if e.code == 401:
            raise JoinRefused("the server refused the bootstrap token (unknown or expired): get a new join "
                              "command from the server (`nodeagent token create`)") from None
        raise JoinRefused(f"the server refused the certificate signing request: {e}") from None
    ok = False
    try:
        deadline = clock.monotonic() + wait_s
        while True:
            csr = await client.get(CSRS, name)
            conds = _conditions(csr)
            for bad in ("Denied", "Failed"):
                if bad in conds:
                    raise JoinRefused(f"certificate signing request {name} {bad.lower()}: "
                                      f"{conds[bad].get('message') or conds[bad].get('reason')}")
            cert = (csr.get("status") or {}).get("certificate")
            if cert:
                ok = True
                return key_pem, base64.b64decode(cert)
            if clock.monotonic() > deadline:
                state = "approved, not signed" if "Approved" in conds else "not approved"
                raise JoinRefused(f"certificate signing request {name} was not signed within {wait_s:.0f}s "
                                  f"({state}; `kubectl certificate approve {name}` approves it by hand)")
            await clock.sleep(0.25)
    except ClientError as e:
        raise JoinRefused(f"waiting for certificate signing request {name}: {e}") from None
    finally:
        if not ok:
            try:
                await client.delete(CSRS, name)
            except ClientError:
                pass


def _write(path: Path, data: bytes, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, data, mode)


def write_credentials(data_dir: Path, server: str, ca_pem: bytes, key_pem: bytes, cert_pem: bytes,
                      node_name: str) -> Path:
    """Key, certificate, then the kubeconfig naming them (its presence means: joined)."""
    pki = data_dir / "pki"
    crt, key = pki / "kubelet-client.crt", pki / "kubelet-client.key"
    _write(key, key_pem)
    _write(crt, cert_pem, 0o644)
    _write(pki / "cluster-ca.crt", ca_pem, 0o644)
    cfg = {"apiVersion": "v1", "kind": "Config", "preferences": {},
           "clusters": [{"name": "nodeagent", "cluster": {
               "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
           "users": [{"name": NODE_PREFIX + node_name, "user": {
               "client-certificate": str(crt.resolve()), "client-key": str(key.resolve())}}],
           "contexts": [{"name": "nodeagent",
                         "context": {"cluster": "nodeagent", "user": NODE_PREFIX + node_name}}],
           "current-context": "nodeagent"}
    path = kubeconfig_path(data_dir)
    _write(path, yaml.safe_dump(cfg, sort_keys=False).encode())
    return path


def existing_credential(data_dir: Path, server: str, node_name: str, ca_hashes: list[str],
                        now: dt.datetime) -> Path | None:
    """A kubeconfig an earlier join wrote for this server, node and pinned CA, with a certificate still valid
    for at least an hour (an agent restart reuses its identity instead of joining again)."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    path = kubeconfig_path(data_dir)
    try:
        cfg = yaml.safe_load(path.read_text())
        cluster = cfg["clusters"][0]["cluster"]
        user = cfg["users"][0]["user"]
        cert = x509.load_pem_x509_certificate(Path(user["client-certificate"]).read_bytes())
        ca_pem = base64.b64decode(cluster["certificate-authority-data"])
        Path(user["client-key"]).stat()
    except (OSError, KeyError, IndexError, TypeError, ValueError, yaml.YAMLError):
        return None
    if cluster.get("server", "").rstrip("/") != server.rstrip("/"):
        return None
    cns = [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if cns != [NODE_PREFIX + node_name]:
        return None
    if ca_hashes and tokens.ca_cert_hash(ca_pem) not in [tokens.parse_hash(h) for h in ca_hashes]:
        return None
    if cert.not_valid_after_utc - now < dt.timedelta(hours=1):
        return None
    return path


async def join(server: str, token: str, ca_hashes: list[str], node_name: str, data_dir: str | Path,
               unsafe_skip_ca_verification: bool = False, wait_s: float = 60.0,
               clock: Clock = REAL_CLOCK) -> Path:
    """Join (or reuse an earlier join's credential); returns the node's kubeconfig. JoinRefused on refusal."""
    data_dir = Path(data_dir)
    try:
        tokens.parse_token(token)
        for h in ca_hashes:
            tokens.parse_hash(h)
    except tokens.TokenError as e:
        raise JoinRefused(str(e)) from None
    have = await asyncio.to_thread(existing_credential, data_dir, server, node_name, ca_hashes, utcnow(clock))
    if have is not None:
        log.info("join: reusing the node credential in %s", have)
        return have
    ca_pem = await discover(server, token, ca_hashes, unsafe_skip_ca_verification)
    # trust is the pinned CA, whatever name the server's certificate carries
    async with Client(server, token, ca_data=ca_pem, verify_hostname=False) as client:
        key_pem, cert_pem = await request_certificate(client, node_name, wait_s, clock)
    path = await asyncio.to_thread(write_credentials, data_dir, server, ca_pem, key_pem, cert_pem, node_name)
    log.info("join: node %s joined %s; credential in %s", node_name, server, path)
    return path


def join_in_child(server: str, token: str, ca_hashes: list[str], node_name: str, data_dir: str,
                  unsafe_skip_ca_verification: bool = False) -> Path:
    """`join` run in a child process (nodeagent.isolated): the agent that goes on running never loads the
    cryptography the key, CSR and certificate checks need. JoinRefused as `join`."""
    from nodeagent.isolated import call

    return Path(call("nodeagent.kubelet.tls_bootstrap:_join_answer", server, token, ca_hashes, node_name,
                     data_dir, unsafe_skip_ca_verification, errors=(JoinRefused,)))


async def _join_answer(server: str, token: str, ca_hashes: list[str], node_name: str, data_dir: str,
                       unsafe_skip_ca_verification: bool) -> str:
    return str(await join(server, token, ca_hashes, node_name, data_dir, unsafe_skip_ca_verification))
