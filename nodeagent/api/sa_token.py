"""ServiceAccount JWTs as kube-apiserver mints them (pkg/serviceaccount): the claims of bound tokens
(TokenRequest) and of legacy Secret tokens, the key id and algorithm a signing key gives, the JWKS the
issuer publishes, and verification of a token's signature and time claims.

Pure functions over keys and dicts; where the bound objects live (and whether they still exist) is the
authenticator's business. Signing and verifying are PyJWT's.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes, PublicKeyTypes
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from nodeagent.api.sa_names import (  # noqa: F401 (the names are this module's too)
    ALL_GROUP,
    DEFAULT_ISSUER,
    LEGACY_ISSUER,
    USER_PREFIX,
    groups,
    split_username,
    username,
)

KUBE_CLAIM = "kubernetes.io"
# kube's TokenRequest rules (pkg/apis/authentication/validation, pkg/serviceaccount)
MIN_EXPIRATION = 600
MAX_EXPIRATION = 1 << 32
DEFAULT_EXPIRATION = 3600
WARN_ONLY_EXPIRATION = 3607  # what the admission plugin's projected volume asks for
EXTENDED_EXPIRATION = 365 * 24 * 3600  # such a pod-bound token really lives a year, warning after 3607 s
LEEWAY = 60  # go-jose's default leeway for exp/nbf/iat
LEGACY = "kubernetes.io/serviceaccount/"


class TokenInvalid(Exception):
    """Not a valid ServiceAccount token; the reason is for the log, never for the client."""


def key_id(public_key: PublicKeyTypes) -> str:
    """kube's keyIDFromPublicKey: unpadded base64url of the SHA-256 of the DER SubjectPublicKeyInfo."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.urlsafe_b64encode(hashlib.sha256(der).digest()).rstrip(b"=").decode()


def algorithm(key: PrivateKeyTypes | PublicKeyTypes) -> str:
    """RS256 for RSA keys, ES256/384/512 by an EC key's curve (what kube's signer picks); else ValueError."""
    if isinstance(key, (rsa.RSAPrivateKey, rsa.RSAPublicKey)):
        return "RS256"
    if isinstance(key, (ec.EllipticCurvePrivateKey, ec.EllipticCurvePublicKey)):
        by_curve = {"secp256r1": "ES256", "secp384r1": "ES384", "secp521r1": "ES512"}
        if key.curve.name in by_curve:
            return by_curve[key.curve.name]
    raise ValueError(f"a {type(key).__name__} cannot sign ServiceAccount tokens (RSA or EC P-256/384/521)")


def sign(private_key: PrivateKeyTypes, claims: dict[str, Any]) -> str:
    public = private_key.public_key()
    return jwt.encode(claims, private_key, algorithm=algorithm(private_key),  # type: ignore[arg-type]
                      headers={"kid": key_id(public)})


def _ref(obj: dict[str, Any]) -> dict[str, str]:
    m = obj.get("metadata") or {}
    return {"name": m.get("name", ""), "uid": m.get("uid", "")}


def bound_claims(issuer: str, audiences: Sequence[str], sa: dict[str, Any], now: int, expiration: int,
                 pod: dict[str, Any] | None = None, secret: dict[str, Any] | None = None,
                 node: dict[str, Any] | None = None, warn_after: int | None = None) -> dict[str, Any]:
    """The claims of a TokenRequest token (kube's serviceaccount.Claims): the pod's node rides along."""
    m = sa["metadata"]
    kube: dict[str, Any] = {"namespace": m["namespace"], "serviceaccount": _ref(sa)}
    if pod is not None:
        kube["pod"] = _ref(pod)
    if secret is not None:
        kube["secret"] = _ref(secret)
    if node is not None:
        kube["node"] = _ref(node)
    if warn_after is not None:
        kube["warnafter"] = warn_after
    return {"aud": list(audiences), "exp": now + expiration, "iat": now, "iss": issuer,
            "jti": str(uuid.uuid4()), KUBE_CLAIM: kube, "nbf": now,
            "sub": username(m["namespace"], m["name"])}


def legacy_claims(sa: dict[str, Any], secret: dict[str, Any]) -> dict[str, Any]:
    """The claims of a `kubernetes.io/service-account-token` Secret's token: no audience, no expiry."""
    m = sa["metadata"]
    return {"iss": LEGACY_ISSUER, LEGACY + "namespace": m["namespace"],
            LEGACY + "secret.name": secret["metadata"]["name"], LEGACY + "service-account.name": m["name"],
            LEGACY + "service-account.uid": m.get("uid", ""), "sub": username(m["namespace"], m["name"])}


def jwks(public_keys: Iterable[PublicKeyTypes]) -> dict[str, Any]:
    """The JSON Web Key Set at /openid/v1/jwks: each key with its kid, use sig and alg."""
    keys = []
    for k in public_keys:
        if isinstance(k, rsa.RSAPublicKey):
            jwk = RSAAlgorithm.to_jwk(k, as_dict=True)
        elif isinstance(k, ec.EllipticCurvePublicKey):
            jwk = ECAlgorithm.to_jwk(k, as_dict=True)
        else:
            raise ValueError(f"a {type(k).__name__} is not a ServiceAccount token key")
        jwk.pop("key_ops", None)  # kube's keys carry use, not key_ops
        jwk.update({"use": "sig", "kid": key_id(k), "alg": algorithm(k)})
        keys.append(jwk)
    return {"keys": keys}


def openid_configuration(issuer: str, jwks_uri: str) -> dict[str, Any]:
    """kube-apiserver's /.well-known/openid-configuration (pkg/serviceaccount/openidmetadata.go)."""
    return {"issuer": issuer, "jwks_uri": jwks_uri, "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"], "id_token_signing_alg_values_supported": ["RS256"]}


def unverified_issuer(token: str) -> str | None:
    """The `iss` of something shaped like a JWT (which authenticator should look), else None."""
    if token.count(".") != 2:
        return None
    try:
        iss = jwt.decode(token, options={"verify_signature": False}).get("iss")
    except jwt.PyJWTError:
        return None
    return iss if isinstance(iss, str) else None


def verify(token: str, public_keys: Sequence[PublicKeyTypes], now: float) -> dict[str, Any]:
    """The claims of a token signed by one of the keys, within exp/nbf (60 s leeway); TokenInvalid if not.
    Audience and the bound objects are the caller's to check."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError as e:
        raise TokenInvalid(f"malformed: {e}") from None
    kid = header.get("kid")
    candidates = [k for k in public_keys if not kid or key_id(k) == kid] or list(public_keys)
    last: Exception | None = None
    for k in candidates:
        try:
            alg = algorithm(k)
            if header.get("alg") != alg:
                continue
            claims = jwt.decode(token, k, algorithms=[alg],  # type: ignore[arg-type]
                                options={"verify_aud": False, "verify_exp": False, "verify_nbf": False,
                                         "verify_iat": False})
        except (jwt.PyJWTError, ValueError) as e:
            last = e
            continue
        check_times(claims, now)
        return claims
    raise TokenInvalid(f"signature: {last or 'no key for this algorithm'}")


def check_times(claims: dict[str, Any], now: float) -> None:
    exp, nbf = claims.get("exp"), claims.get("nbf")
    if exp is not None and (not isinstance(exp, (int, float)) or now > exp + LEEWAY):
        raise TokenInvalid("expired")
    if nbf is not None and (not isinstance(nbf, (int, float)) or now < nbf - LEEWAY):
        raise TokenInvalid("not valid yet")


def audiences(claims: dict[str, Any]) -> list[str]:
    aud = claims.get("aud")
    if isinstance(aud, str):
        return [aud]
    return [a for a in aud if isinstance(a, str)] if isinstance(aud, list) else []
