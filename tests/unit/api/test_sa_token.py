"""ServiceAccount JWTs: kube's claims, kid and algorithm by key type, verification of signature and times,
and the authenticator's bound-object and audience checks (with the objects in a dict)."""

from __future__ import annotations

import base64
import json
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwcrypto import jwk as jwc_jwk
from jwcrypto import jwt as jwc_jwt

from nodeagent.api import sa_token
from nodeagent.apiserver.authn.serviceaccount import ServiceAccountAuthenticator, ServiceAccountKeys
from nodeagent.testing.clock import FakeClock

NOW = 1_800_000_000
SA = {"metadata": {"name": "default", "namespace": "ns1", "uid": "sa-uid"}}
POD = {"metadata": {"name": "p", "namespace": "ns1", "uid": "pod-uid"}, "spec": {"nodeName": "n1"}}
NODE = {"metadata": {"name": "n1", "uid": "node-uid"}}
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def test_bound_claims_are_kube_apiservers():
    c = sa_token.bound_claims("https://iss", ["a"], SA, NOW, 3600, pod=POD, node=NODE, warn_after=NOW + 3607)
    assert c["sub"] == "system:serviceaccount:ns1:default"
    assert (c["iss"], c["aud"], c["iat"], c["nbf"], c["exp"]) == ("https://iss", ["a"], NOW, NOW, NOW + 3600)
    assert c["kubernetes.io"] == {"namespace": "ns1", "serviceaccount": {"name": "default", "uid": "sa-uid"},
                                  "pod": {"name": "p", "uid": "pod-uid"},
                                  "node": {"name": "n1", "uid": "node-uid"}, "warnafter": NOW + 3607}
    assert len(c["jti"]) == 36


def test_algorithm_follows_the_key_and_the_kid_is_the_spki_hash():
    assert sa_token.algorithm(RSA_KEY) == "RS256"
    assert sa_token.algorithm(ec.generate_private_key(ec.SECP256R1())) == "ES256"
    assert sa_token.algorithm(ec.generate_private_key(ec.SECP384R1())) == "ES384"
    tok = sa_token.sign(RSA_KEY, {"sub": "x"})
    header = jwt.get_unverified_header(tok)
    assert header["alg"] == "RS256" and header["kid"] == sa_token.key_id(RSA_KEY.public_key())
    assert len(header["kid"]) == 43 and "=" not in header["kid"]


def test_an_independent_library_verifies_a_token_against_the_jwks():
    claims = sa_token.bound_claims("https://iss", ["a"], SA, NOW, 3600)
    tok = sa_token.sign(RSA_KEY, claims)
    keyset = jwc_jwk.JWKSet.from_json(json.dumps(sa_token.jwks([RSA_KEY.public_key()])))
    verified = jwc_jwt.JWT(jwt=tok, key=keyset, check_claims=False)
    assert json.loads(verified.claims)["sub"] == "system:serviceaccount:ns1:default"
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(jwc_jwt.JWTMissingKey):  # signed by a key the set does not hold
        jwc_jwt.JWT(jwt=sa_token.sign(other, claims), key=keyset, check_claims=False)


def test_verify_refuses_tampered_foreign_expired_and_early_tokens():
    claims = sa_token.bound_claims("https://iss", ["a"], SA, NOW, 600)
    tok = sa_token.sign(RSA_KEY, claims)
    keys = [RSA_KEY.public_key()]
    assert sa_token.verify(tok, keys, NOW + 10)["sub"] == claims["sub"]
    head, body, sig = tok.split(".")
    forged = dict(claims, sub="system:serviceaccount:kube-system:admin")
    body2 = base64.urlsafe_b64encode(json.dumps(forged).encode()).rstrip(b"=").decode()
    for bad in (f"{head}.{body2}.{sig}", sa_token.sign(rsa.generate_private_key(65537, 2048), claims),
                "not-a-jwt", f"{head}.{body}."):
        with pytest.raises(sa_token.TokenInvalid):
            sa_token.verify(bad, keys, NOW + 10)
    sa_token.verify(tok, keys, NOW + 600 + sa_token.LEEWAY)  # within the leeway
    with pytest.raises(sa_token.TokenInvalid, match="expired"):
        sa_token.verify(tok, keys, NOW + 600 + sa_token.LEEWAY + 1)
    with pytest.raises(sa_token.TokenInvalid, match="not valid yet"):
        sa_token.verify(tok, keys, NOW - sa_token.LEEWAY - 1)


def _authenticator(tmp_path, objects: dict[str, dict[str, Any]],
                   clock: FakeClock | None = None) -> ServiceAccountAuthenticator:
    async def get(key: str) -> dict[str, Any] | None:
        return objects.get(key)

    keys = ServiceAccountKeys(tmp_path / "pki", "https://iss")
    return ServiceAccountAuthenticator(keys, get, clock or FakeClock(NOW))


async def test_authenticator_checks_audience_and_the_bound_pod(tmp_path):
    objects = {"/registry/serviceaccounts/ns1/default": SA, "/registry/pods/ns1/p": POD}
    clock = FakeClock(NOW)
    a = _authenticator(tmp_path, objects, clock)
    now = NOW
    claims = sa_token.bound_claims("https://iss", ["https://iss"], SA, now, 3600, pod=POD, node=NODE)
    tok = a.keys.sign(claims)
    user = await a.authenticate(f"Bearer {tok}")
    assert user is not None and user.name == "system:serviceaccount:ns1:default"
    assert user.groups == ("system:serviceaccounts", "system:serviceaccounts:ns1") and user.uid == "sa-uid"
    extra = dict(user.extra)
    assert extra["authentication.kubernetes.io/pod-name"] == ("p",)
    assert extra["authentication.kubernetes.io/node-name"] == ("n1",)
    wrong_aud = a.keys.sign(sa_token.bound_claims("https://iss", ["vault"], SA, now, 3600))
    assert await a.authenticate(f"Bearer {wrong_aud}") is None
    objects["/registry/pods/ns1/p"] = {"metadata": {"name": "p", "uid": "another"}}  # recreated
    assert await a.authenticate(f"Bearer {tok}") is None
    del objects["/registry/pods/ns1/p"]
    assert await a.authenticate(f"Bearer {tok}") is None
    objects["/registry/pods/ns1/p"] = POD
    assert await a.authenticate(f"Bearer {tok}") is not None  # the cached signature, checks still made
    clock.advance(3600 + sa_token.LEEWAY + 1)
    assert await a.authenticate(f"Bearer {tok}") is None
    assert await a.authenticate("Bearer some-static-token") is None  # not ours: the next authenticator's


async def test_legacy_token_lives_as_long_as_its_secret_holds_it(tmp_path):
    secret: dict[str, Any] = {"metadata": {"name": "t", "namespace": "ns1"}, "data": {}}
    objects = {"/registry/serviceaccounts/ns1/default": SA, "/registry/secrets/ns1/t": secret}
    a = _authenticator(tmp_path, objects)
    tok = a.keys.sign(sa_token.legacy_claims(SA, secret))
    assert await a.authenticate(f"Bearer {tok}") is None
    secret["data"]["token"] = base64.b64encode(tok.encode()).decode()
    user = await a.authenticate(f"Bearer {tok}")
    assert user is not None and user.name == "system:serviceaccount:ns1:default"
    del objects["/registry/secrets/ns1/t"]
    assert await a.authenticate(f"Bearer {tok}") is None
