"""ServiceAccount tokens against a real `nodeagent server`: `kubectl create token` (1.32; 1.20 has no such
command), the token verified by an independent JWT library against /openid/v1/jwks, and the 401s a
tampered, wrong-audience or unbound token gets."""

from __future__ import annotations

import base64
import json
import subprocess
import time
import uuid

import jwt
import pytest
from jwcrypto import jwk as jwc_jwk
from jwcrypto import jwt as jwc_jwt

from tests.integration.apiserver.http import call

UNAUTHORIZED = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Unauthorized", "reason": "Unauthorized", "code": 401}


@pytest.fixture
def kubectl132(kubectl):
    if kubectl.version != "1.32":
        p = kubectl.run("create", "token", "default", check=False)
        assert p.returncode != 0  # kubectl 1.20 has no `create token`: TokenRequest via the API only
        pytest.skip("kubectl 1.20 has no `create token`")
    return kubectl


def new_ns(kubectl) -> str:
    ns = f"tok-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", ns)
    kubectl("create", "serviceaccount", "app", "-n", ns)
    return ns


def whoami(server, token: str) -> tuple[int, dict]:
    """The answer to a list with this token: 403 names the authenticated user, 401 is no user at all."""
    return call(server, "GET", "/api/v1/namespaces/default/pods", token=token)


def test_create_token_verified_by_jwks_and_used(kubectl132, server):
    ns = new_ns(kubectl132)
    tok = kubectl132("create", "token", "app", "-n", ns, "--duration", "15m").strip()
    code, jwks = call(server, "GET", "/openid/v1/jwks")
    assert code == 200
    keyset = jwc_jwk.JWKSet.from_json(json.dumps(jwks))
    claims = json.loads(jwc_jwt.JWT(jwt=tok, key=keyset, check_claims={"exp": None}).claims)
    sa = json.loads(kubectl132("get", "sa", "app", "-n", ns, "-o", "json"))
    assert claims["sub"] == f"system:serviceaccount:{ns}:app"
    assert claims["iss"] == "https://kubernetes.default.svc.cluster.local"
    assert claims["aud"] == ["https://kubernetes.default.svc.cluster.local"]
    assert claims["exp"] - claims["iat"] == 900
    assert claims["kubernetes.io"]["serviceaccount"] == {"name": "app", "uid": sa["metadata"]["uid"]}
    code, disc = call(server, "GET", "/.well-known/openid-configuration")
    assert code == 200 and disc["issuer"] == claims["iss"] and disc["jwks_uri"].endswith("/openid/v1/jwks")
    code, body = whoami(server, tok)
    assert code == 403, body
    assert f'User "system:serviceaccount:{ns}:app" cannot list resource "pods"' in body["message"]
    # the scheme is case-insensitive (the Python client's in-cluster config sends "bearer")
    code, body = call(server, "GET", "/api/v1/namespaces/default/pods", token=None,
                      headers={"Authorization": f"bearer {tok}"})
    assert code == 403 and f"system:serviceaccount:{ns}:app" in body["message"]
    # kubectl --token with the token alone
    p = kubectl132.run("--kubeconfig", "/dev/null", "--server", server.url, "--certificate-authority",
                       str(server.ca_file), "--token", tok, "get", "pods", "-n", ns, check=False)
    assert p.returncode == 1 and f"system:serviceaccount:{ns}:app" in p.stderr
    assert whoami(server, tok)[0] == 403
    kubectl132("delete", "sa", "app", "-n", ns)
    assert whoami(server, tok) == (401, UNAUTHORIZED)


def test_bad_tokens_get_a_bare_401(kubectl132, server):
    ns = new_ns(kubectl132)
    tok = kubectl132("create", "token", "app", "-n", ns).strip()
    head, body, sig = tok.split(".")
    claims = jwt.decode(tok, options={"verify_signature": False})
    claims["sub"] = "system:serviceaccount:kube-system:default"
    forged = jwt.encode(claims, "a-guessed-shared-secret-of-32-bytes!", algorithm="HS256")
    other_aud = kubectl132("create", "token", "app", "-n", ns, "--audience", "vault").strip()
    for bad in (f"{head}.{body}.{sig[:-4]}AAAA", forged, f"{jwt.encode(claims, '', algorithm='none')}",
                other_aud):
        assert whoami(server, bad) == (401, UNAUTHORIZED), bad
    # the audience asked for is the one in the token
    assert jwt.decode(other_aud, options={"verify_signature": False})["aud"] == ["vault"]


def test_bound_to_a_pod_or_secret_dies_with_it(kubectl132, server):
    ns = new_ns(kubectl132)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": ns},
           "spec": {"serviceAccountName": "app", "automountServiceAccountToken": False,
                    "containers": [{"name": "c", "image": "busybox"}]}}
    kubectl132("apply", "-f", "-", input=json.dumps(pod))
    tok = kubectl132("create", "token", "app", "-n", ns, "--bound-object-kind", "Pod",
                     "--bound-object-name", "p").strip()
    claims = jwt.decode(tok, options={"verify_signature": False})
    uid = json.loads(kubectl132("get", "pod", "p", "-n", ns, "-o", "json"))["metadata"]["uid"]
    assert claims["kubernetes.io"]["pod"] == {"name": "p", "uid": uid}
    assert whoami(server, tok)[0] == 403
    kubectl132("delete", "pod", "p", "-n", ns, "--grace-period=0", "--force", "--wait=false")
    kubectl132("apply", "-f", "-", input=json.dumps(pod))  # the same name, another uid
    assert whoami(server, tok) == (401, UNAUTHORIZED)
    kubectl132("create", "secret", "generic", "s", "-n", ns, "--from-literal=a=b")
    stok = kubectl132("create", "token", "app", "-n", ns, "--bound-object-kind", "Secret",
                      "--bound-object-name", "s").strip()
    assert whoami(server, stok)[0] == 403
    kubectl132("delete", "secret", "s", "-n", ns)
    assert whoami(server, stok) == (401, UNAUTHORIZED)


def test_token_request_bad_input(kubectl132, server):
    ns = new_ns(kubectl132)
    p = kubectl132.run("create", "token", "app", "-n", ns, "--duration", "2m", check=False)
    assert p.returncode == 1 and "may not specify a duration less than 10 minutes" in p.stderr
    p = kubectl132.run("create", "token", "nobody", "-n", ns, check=False)
    assert p.returncode == 1 and 'serviceaccounts "nobody" not found' in p.stderr
    p = kubectl132.run("create", "token", "app", "-n", ns, "--bound-object-kind", "Pod",
                       "--bound-object-name", "missing", check=False)
    assert p.returncode == 1 and 'pods "missing" not found' in p.stderr
    path = f"/api/v1/namespaces/{ns}/serviceaccounts/app/token"
    code, body = call(server, "POST", path, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                             "spec": {"boundObjectRef": {"kind": "Deployment", "name": "d",
                                                                         "apiVersion": "apps/v1"}}})
    assert code == 400 and "cannot bind token to object of type" in body["message"]
    code, _ = call(server, "GET", "/openid/v1/jwks", token=None)
    assert code == 403  # system:service-account-issuer-discovery is bound to system:serviceaccounts only


def wait_for(fn, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_legacy_token_secret_is_filled_and_used_with_curl(kubectl, server, tmp_path):
    """The seed's recipe: a kubernetes.io/service-account-token Secret, filled by the token controller,
    its token used with curl; it stops working when the Secret is deleted. Nothing makes one unasked."""
    ns = new_ns(kubectl)
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
              "metadata": {"name": "default-token", "namespace": ns,
                           "annotations": {"kubernetes.io/service-account.name": "app"}}}
    kubectl("apply", "-f", "-", input=json.dumps(secret))

    def filled() -> dict | None:
        s = json.loads(kubectl("get", "secret", "default-token", "-n", ns, "-o", "json"))
        return s if {"token", "ca.crt", "namespace"} <= set(s.get("data") or {}) else None
    s = wait_for(filled)
    token = base64.b64decode(s["data"]["token"]).decode()
    (tmp_path / "ca.crt").write_bytes(base64.b64decode(s["data"]["ca.crt"]))
    assert base64.b64decode(s["data"]["namespace"]).decode() == ns
    sa = json.loads(kubectl("get", "sa", "app", "-n", ns, "-o", "json"))
    assert s["metadata"]["annotations"]["kubernetes.io/service-account.uid"] == sa["metadata"]["uid"]
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["iss"] == "kubernetes/serviceaccount" and "exp" not in claims
    curl = ["curl", "-sS", "--header", f"Authorization: Bearer {token}", "--cacert", str(tmp_path / "ca.crt"),
            f"{server.url}/api/v1/namespaces/{ns}/pods"]
    out = json.loads(subprocess.run(curl, capture_output=True, text=True, check=True).stdout)
    assert out["code"] == 403 and f'User "system:serviceaccount:{ns}:app"' in out["message"]
    p = kubectl.run("--kubeconfig", "/dev/null", "--server", server.url, "--certificate-authority",
                    str(tmp_path / "ca.crt"), "--token", token, "get", "pods", "-n", ns, check=False)
    assert p.returncode == 1 and f"system:serviceaccount:{ns}:app" in p.stderr  # both kubectls
    names = kubectl("get", "secrets", "-n", ns, "-o", "name").split()
    assert names == ["secret/default-token"]  # no token Secret made unasked (since 1.24)
    kubectl("delete", "secret", "default-token", "-n", ns)
    out = json.loads(subprocess.run(curl, capture_output=True, text=True, check=True).stdout)
    assert out == UNAUTHORIZED


def test_every_namespace_gets_kube_root_ca(kubectl, server):
    """What the projected ServiceAccount volume reads its ca.crt from (published by the apiserver's
    bootstrap loop, put back within its repair interval)."""
    ns = new_ns(kubectl)
    ca = server.ca_file.read_text()

    def published() -> str:
        p = kubectl.run("get", "configmap", "kube-root-ca.crt", "-n", ns, "-o", "json", check=False)
        return json.loads(p.stdout)["data"]["ca.crt"] if p.returncode == 0 else ""
    assert wait_for(published) == ca
    kubectl("delete", "configmap", "kube-root-ca.crt", "-n", ns)
    assert wait_for(published) == ca  # put back


def token_review(server, token: str, audiences: list[str] | None = None) -> dict:
    spec: dict = {"token": token}
    if audiences is not None:
        spec["audiences"] = audiences
    code, body = call(server, "POST", "/apis/authentication.k8s.io/v1/tokenreviews",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec})
    assert code == 201, body
    return body["status"]


def test_token_review_checks_the_audiences_asked_for(kubectl132, server):
    ns = new_ns(kubectl132)
    api = "https://kubernetes.default.svc.cluster.local"
    vault = kubectl132("create", "token", "app", "-n", ns, "--audience", "vault").strip()
    st = token_review(server, vault, ["vault", "other"])
    assert st["authenticated"] is True and st["audiences"] == ["vault"]
    assert st["user"]["username"] == f"system:serviceaccount:{ns}:app"
    st = token_review(server, vault, ["other"])
    assert st.get("authenticated") is not True and not st.get("user"), st
    assert st["error"] == 'token audiences ["vault"] is invalid for the target audiences ["other"]'
    st = token_review(server, vault)  # none asked: the API's, which this token does not hold
    assert st.get("authenticated") is not True
    assert st["error"] == f'token audiences ["vault"] is invalid for the target audiences ["{api}"]'
    plain = kubectl132("create", "token", "app", "-n", ns).strip()
    st = token_review(server, plain)
    assert st["authenticated"] is True and st["audiences"] == [api]
    # a static token (the admin's) holds the API's audiences only, as kube's audience-agnostic wrapper
    st = token_review(server, server.token, [api, "vault"])
    assert st["authenticated"] is True and st["audiences"] == [api] and st["user"]["username"] == "admin"
    st = token_review(server, server.token, ["vault"])
    assert st.get("authenticated") is not True and st["error"] == "invalid bearer token"
