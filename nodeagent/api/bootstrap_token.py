"""Bootstrap tokens, kubeadm's CA public-key hash and the detached JWS that signs cluster-info.

Pure functions, in k8s.io/cluster-bootstrap's place: the apiserver's authenticator and cluster-info signer,
the controllers' CSR approver, the kubelet's TLS bootstrap and `nodeagent token` all read tokens through
this one module.

- A token is `<id>.<secret>`, `[a-z0-9]{6}.[a-z0-9]{16}`, stored as the Secret `bootstrap-token-<id>` in
  kube-system (type bootstrap.kubernetes.io/token); it authenticates as `system:bootstrap:<id>` in
  `system:bootstrappers` (plus its auth-extra-groups) while not expired.
- The CA hash is `sha256:` + hex SHA-256 of the CA certificate's DER SubjectPublicKeyInfo (kubeadm's pin).
- cluster-info's `jws-kubeconfig-<id>` is a detached compact JWS (HS256, key = the token secret,
  header `kid` = the token id) over the `kubeconfig` entry: `<header>..<signature>`.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import json
import re
import secrets
import string
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cryptography import x509

TOKEN_RE = re.compile(r"^([a-z0-9]{6})\.([a-z0-9]{16})$")
SECRET_TYPE = "bootstrap.kubernetes.io/token"
SECRET_PREFIX = "bootstrap-token-"
NAMESPACE = "kube-system"
BOOTSTRAPPERS_GROUP = "system:bootstrappers"
USER_PREFIX = "system:bootstrap:"
JWS_PREFIX = "jws-kubeconfig-"
_ALPHABET = string.ascii_lowercase + string.digits


class TokenError(ValueError):
    """A string that is not a bootstrap token, or a Secret that is not a usable one."""


def generate_token() -> str:
    """A new random token, `[a-z0-9]{6}.[a-z0-9]{16}`."""
    pick = "".join(secrets.choice(_ALPHABET) for _ in range(22))
    return f"{pick[:6]}.{pick[6:]}"


def parse_token(token: str) -> tuple[str, str]:
    """(id, secret), or TokenError for anything that is not a bootstrap token."""
    m = TOKEN_RE.match(token or "")
    if m is None:
        raise TokenError("a bootstrap token has the form [a-z0-9]{6}.[a-z0-9]{16}, e.g. "
                         "abcdef.0123456789abcdef")
    return m.group(1), m.group(2)


def is_token(token: str) -> bool:
    return TOKEN_RE.match(token or "") is not None


def join_command(server_url: str, token: str, ca_hash: str) -> str:
    """The command line that joins a node with this token, pinning the CA by its hash."""
    return f"nodeagent agent --server {server_url} --token {token} --ca-cert-hash {ca_hash}"


def _rfc3339(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def token_secret(token: str, ttl: float | None, description: str = "",
                 extra_groups: tuple[str, ...] = ("system:bootstrappers:kubeadm:default-node-token",),
                 now: dt.datetime | None = None) -> dict[str, Any]:
    """The kube-system Secret that makes `token` valid (for `ttl` seconds; None or 0: never expires)."""
    tid, tsecret = parse_token(token)
    data = {"token-id": tid, "token-secret": tsecret, "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true"}
    if extra_groups:
        data["auth-extra-groups"] = ",".join(extra_groups)
    if description:
        data["description"] = description
    if ttl:
        data["expiration"] = _rfc3339((now or dt.datetime.now(dt.UTC)) + dt.timedelta(seconds=ttl))
    return {"apiVersion": "v1", "kind": "Secret", "type": SECRET_TYPE,
            "metadata": {"name": SECRET_PREFIX + tid, "namespace": NAMESPACE},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}


def secret_fields(secret: dict[str, Any]) -> dict[str, str]:
    """The Secret's data (and stringData), decoded."""
    out = {k: base64.b64decode(v).decode(errors="replace") for k, v in (secret.get("data") or {}).items()}
    out.update(secret.get("stringData") or {})
    return out


def expiration(fields: dict[str, str]) -> dt.datetime | None:
    raw = fields.get("expiration")
    if not raw:
        return None
    try:
        return dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return dt.datetime.min.replace(tzinfo=dt.UTC)  # unparsable: treated as expired, as the apiserver does


def is_expired(fields: dict[str, str], now: dt.datetime | None = None) -> bool:
    exp = expiration(fields)
    return exp is not None and exp <= (now or dt.datetime.now(dt.UTC))


def check_secret(secret: dict[str, Any], token_id: str, token_secret_: str | None, usage: str,
                 now: dt.datetime | None = None) -> dict[str, str]:
    """The Secret's fields when it is a live bootstrap token for `token_id` (and `token_secret_`) allowed
    `usage` ("authentication" or "signing"); TokenError saying why not otherwise."""
    if secret.get("type") != SECRET_TYPE:
        raise TokenError(f"secret is not of type {SECRET_TYPE}")
    f = secret_fields(secret)
    if f.get("token-id") != token_id:
        raise TokenError("token id does not match the secret")
    if token_secret_ is not None and not hmac.compare_digest(f.get("token-secret", ""), token_secret_):
        raise TokenError("token secret does not match")
    if f.get(f"usage-bootstrap-{usage}") != "true":
        raise TokenError(f"token is not allowed for {usage}")
    if (secret.get("metadata") or {}).get("deletionTimestamp"):
        raise TokenError("token is being deleted")
    if is_expired(f, now):
        raise TokenError("token has expired")
    return f


def token_groups(fields: dict[str, str]) -> tuple[str, ...]:
    extra = [g.strip() for g in fields.get("auth-extra-groups", "").split(",") if g.strip()]
    return (BOOTSTRAPPERS_GROUP, *[g for g in extra if g.startswith(BOOTSTRAPPERS_GROUP + ":")])


# ------------------------------------------------------------------ CA pinning
def ca_cert_hash(cert: x509.Certificate | bytes | str) -> str:
    """kubeadm's `--discovery-token-ca-cert-hash`: sha256 of the DER SubjectPublicKeyInfo."""
    from cryptography import x509  # here: a joining agent checks tokens without loading it (isolated.py)
    from cryptography.hazmat.primitives import serialization

    if not isinstance(cert, x509.Certificate):
        cert = x509.load_pem_x509_certificate(cert.encode() if isinstance(cert, str) else cert)
    spki = cert.public_key().public_bytes(serialization.Encoding.DER,
                                          serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def parse_hash(pin: str) -> str:
    """A normalized `sha256:<64 hex>` pin, or TokenError."""
    kind, sep, value = (pin or "").partition(":")
    if not sep or kind.lower() != "sha256" or not re.fullmatch(r"[0-9a-fA-F]{64}", value):
        raise TokenError(f"invalid --ca-cert-hash {pin!r}: want sha256:<64 hex digits>")
    return "sha256:" + value.lower()


# ------------------------------------------------------------------ JWS
def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign_detached(content: str | bytes, token_id: str, token_secret_: str) -> str:
    """Compact JWS with the payload left out (`header..signature`), HS256 keyed by the token secret."""
    payload = content.encode() if isinstance(content, str) else content
    header = _b64(json.dumps({"alg": "HS256", "kid": token_id}, separators=(",", ":")).encode())
    signing_input = f"{header}.{_b64(payload)}".encode()
    sig = hmac.new(token_secret_.encode(), signing_input, hashlib.sha256).digest()
    return f"{header}..{_b64(sig)}"


def verify_detached(detached: str, content: str | bytes, token_id: str, token_secret_: str) -> bool:
    """True when `detached` is an HS256 JWS over `content` by this token (kid must match when present)."""
    parts = (detached or "").split(".")
    if len(parts) != 3 or parts[1] != "":
        return False
    try:
        header = json.loads(_unb64(parts[0]))
        sig = _unb64(parts[2])
    except (ValueError, TypeError):
        return False
    if not isinstance(header, dict) or header.get("alg") != "HS256" \
            or header.get("kid", token_id) != token_id:
        return False
    payload = content.encode() if isinstance(content, str) else content
    want = hmac.new(token_secret_.encode(), f"{parts[0]}.{_b64(payload)}".encode(), hashlib.sha256).digest()
    return hmac.compare_digest(sig, want)
