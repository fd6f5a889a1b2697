"""Image pull credentials: kubelet keyring's URL matching (TestURLsMatch's table), lookup order, the two
Secret types, and the repository names images normalise to."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from nodeagent.kubelet.pullsecrets import (
    Credential,
    Keyring,
    KeyringError,
    credentials_for,
    docker_config,
    repository,
    urls_match,
)

URL_CASES = [
    ("*.kubernetes.io", "prefix.kubernetes.io", True),
    ("prefix.*.io", "prefix.kubernetes.io", True),
    ("prefix.kubernetes.*", "prefix.kubernetes.io", True),
    ("*-good.kubernetes.io", "prefix-good.kubernetes.io", True),
    ("*.kubernetes.io/blah", "prefix.kubernetes.io/blah", True),
    ("prefix.*.io/foo", "prefix.kubernetes.io/foo/bar", True),
    ("*.kubernetes.io:1111/blah", "prefix.kubernetes.io:1111/blah", True),
    ("prefix.*.io:1111/foo", "prefix.kubernetes.io:1111/foo/bar", True),
    ("*.kubernetes.io", "kubernetes.io", False),
    ("*.*.kubernetes.io", "prefix.kubernetes.io", False),
    ("*.*.kubernetes.io", "kubernetes.io", False),
    ("kubernetes.io", "kubernetes.com", False),
    ("k*.io", "quay.io", False),
    ("*.kubernetes.io:1234/blah", "prefix.kubernetes.io:1111/blah", False),
    ("prefix.*.io/foo", "prefix.kubernetes.io:1111/foo/bar", False),
]


@pytest.mark.parametrize(("glob", "target", "match"), URL_CASES, ids=[f"{g} ~ {t}" for g, t, _ in URL_CASES])
def test_urls_match(glob: str, target: str, match: bool) -> None:
    assert urls_match(glob, target) is match


@pytest.mark.parametrize(("image", "repo"), [
    ("busybox", "docker.io/library/busybox"),
    ("busybox:1.36", "docker.io/library/busybox"),
    ("library/busybox@sha256:" + "0" * 64, "docker.io/library/busybox"),
    ("docker.io/busybox", "docker.io/library/busybox"),
    ("index.docker.io/me/app:v1", "docker.io/me/app"),
    ("127.0.0.1:5000/team/app:v1", "127.0.0.1:5000/team/app"),
    ("localhost/app", "localhost/app"),
    ("quay.io/coreos/etcd:v3", "quay.io/coreos/etcd"),
])
def test_repository(image: str, repo: str) -> None:
    assert repository(image) == repo


def _secret(typ: str, key: str, doc: Any) -> dict[str, Any]:
    return {"type": typ, "data": {key: base64.b64encode(json.dumps(doc).encode()).decode()}}


def _auth(user: str, pw: str) -> str:
    return base64.b64encode(f"{user}:{pw}".encode()).decode()


def test_dockerconfigjson_and_dockercfg_secrets() -> None:
    json_secret = _secret("kubernetes.io/dockerconfigjson", ".dockerconfigjson",
                          {"auths": {"127.0.0.1:5000": {"auth": _auth("u", "p:w")}}})
    cfg_secret = _secret("kubernetes.io/dockercfg", ".dockercfg",
                         {"https://quay.io/v1/": {"username": "q", "password": "x", "email": "a@b"}})
    assert docker_config(json_secret) == {
        "127.0.0.1:5000": Credential("u", "p:w", server_address="127.0.0.1:5000")}
    assert credentials_for("quay.io/coreos/etcd", [json_secret, cfg_secret])[0].username == "q"
    assert credentials_for("127.0.0.1:5000/app:1", [json_secret, cfg_secret])[0].password == "p:w"
    assert credentials_for("127.0.0.1:5001/app:1", [json_secret, cfg_secret]) == []
    assert docker_config({"type": "Opaque", "data": {".dockerconfigjson": "e30="}}) == {}


def test_malformed_auth_field_is_an_error() -> None:
    bad = _secret("kubernetes.io/dockerconfigjson", ".dockerconfigjson",
                  {"auths": {"r.example": {"auth": base64.b64encode(b"nocolon").decode()}}})
    with pytest.raises(KeyringError, match="must be formatted as base64"):
        docker_config(bad)


def test_most_specific_path_first_and_docker_hub_aliases() -> None:
    ring = Keyring([{"quay.io": Credential("host"), "quay.io/coreos": Credential("path")},
                    {"https://index.docker.io/v1/": Credential("hub")}])
    assert [c.username for c in ring.lookup("quay.io/coreos/etcd")] == ["path", "host"]
    assert [c.username for c in ring.lookup("quay.io/other/x")] == ["host"]
    assert [c.username for c in ring.lookup(repository("busybox"))] == ["hub"]
    assert [c.username for c in ring.lookup(repository("docker.io/me/app"))] == ["hub"]
    assert ring.lookup("ghcr.io/me/app") == []
