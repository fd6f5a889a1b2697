"""Bootstrap token format, the token Secret, kubeadm's CA hash and the detached JWS of cluster-info."""

import base64
import datetime as dt
import hashlib
import hmac
import json

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from nodeagent.api import bootstrap_token as tokens


def test_generated_tokens_have_kubeadms_format_and_differ():
    seen = {tokens.generate_token() for _ in range(50)}
    assert len(seen) == 50
    for t in seen:
        assert tokens.TOKEN_RE.match(t)
        tid, secret = tokens.parse_token(t)
        assert len(tid) == 6 and len(secret) == 16


@pytest.mark.parametrize("bad", ["", "abcdef", "abcdef.0123456789abcde", "ABCDEF.0123456789abcdef",
                                 "abcdef:0123456789abcdef", "abcdef.0123456789abcdef0",
                                 "abc-ef.0123456789abcdef"])
def test_malformed_tokens_are_rejected(bad):
    assert not tokens.is_token(bad)
    with pytest.raises(tokens.TokenError):
        tokens.parse_token(bad)


def test_secret_is_the_kubeadm_shape_and_checks_secret_usage_and_expiry():
    now = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    s = tokens.token_secret("abcdef.0123456789abcdef", 3600, now=now)
    assert s["metadata"] == {"name": "bootstrap-token-abcdef", "namespace": "kube-system"}
    assert s["type"] == "bootstrap.kubernetes.io/token"
    f = tokens.secret_fields(s)
    assert f["token-id"] == "abcdef" and f["token-secret"] == "0123456789abcdef"
    assert f["expiration"] == "2030-01-01T01:00:00Z"
    assert tokens.check_secret(s, "abcdef", "0123456789abcdef", "authentication", now=now)
    assert tokens.token_groups(f) == (
        "system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token")
    with pytest.raises(tokens.TokenError, match="secret does not match"):
        tokens.check_secret(s, "abcdef", "0123456789abcdeX", "authentication", now=now)
    with pytest.raises(tokens.TokenError, match="expired"):
        tokens.check_secret(s, "abcdef", "0123456789abcdef", "authentication",
                            now=now + dt.timedelta(hours=2))
    s["data"]["usage-bootstrap-authentication"] = base64.b64encode(b"false").decode()
    with pytest.raises(tokens.TokenError, match="not allowed"):
        tokens.check_secret(s, "abcdef", "0123456789abcdef", "authentication", now=now)
    assert "expiration" not in tokens.secret_fields(tokens.token_secret("abcdef.0123456789abcdef", 0))


def _cert():
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ca")])
    now = dt.datetime.now(dt.UTC)
    return (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + dt.timedelta(days=1))
            .sign(key, hashes.SHA256()))


def test_ca_hash_is_sha256_of_the_der_subject_public_key_info():
    cert = _cert()
    pem = cert.public_bytes(serialization.Encoding.PEM)
    # the same bytes `openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum` hashes
    spki = cert.public_key().public_bytes(serialization.Encoding.DER,
                                          serialization.PublicFormat.SubjectPublicKeyInfo)
    assert tokens.ca_cert_hash(pem) == "sha256:" + hashlib.sha256(spki).hexdigest()
    assert tokens.ca_cert_hash(cert) == tokens.ca_cert_hash(pem.decode())
    assert tokens.ca_cert_hash(_cert()) != tokens.ca_cert_hash(cert)
    assert tokens.parse_hash("SHA256:" + "AB" * 32) == "sha256:" + "ab" * 32
    for bad in ("ab" * 32, "sha1:" + "ab" * 20, "sha256:xyz"):
        with pytest.raises(tokens.TokenError):
            tokens.parse_hash(bad)


def test_detached_jws_matches_rfc7515_hs256_and_verifies_only_with_the_right_token():
    content = "apiVersion: v1\nkind: Config\n"
    jws = tokens.sign_detached(content, "abcdef", "0123456789abcdef")
    header_b64, empty, sig_b64 = jws.split(".")
    assert empty == ""
    header = json.loads(base64.urlsafe_b64decode(header_b64 + "=" * (-len(header_b64) % 4)))
    assert header == {"alg": "HS256", "kid": "abcdef"}
    payload_b64 = base64.urlsafe_b64encode(content.encode()).rstrip(b"=").decode()
    want = hmac.new(b"0123456789abcdef", f"{header_b64}.{payload_b64}".encode(), hashlib.sha256).digest()
    assert base64.urlsafe_b64encode(want).rstrip(b"=").decode() == sig_b64
    assert tokens.verify_detached(jws, content, "abcdef", "0123456789abcdef")
    assert not tokens.verify_detached(jws, content + " ", "abcdef", "0123456789abcdef")
    assert not tokens.verify_detached(jws, content, "abcdef", "0123456789abcdeX")
    assert not tokens.verify_detached(jws, content, "zzzzzz", "0123456789abcdef")  # kid mismatch
    assert not tokens.verify_detached(jws.replace("..", ".eA."), content, "abcdef", "0123456789abcdef")
    assert not tokens.verify_detached("garbage", content, "abcdef", "0123456789abcdef")
    none_alg = base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode()
    assert not tokens.verify_detached(f"{none_alg}..", content, "abcdef", "0123456789abcdef")
