import pytest

from cri.images.errors import InvalidReference
from cri.images.reference import is_id, parse

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize("ref,name,tag,digest", [
    ("busybox", "docker.io/library/busybox", "latest", None),
    ("busybox:1.36", "docker.io/library/busybox", "1.36", None),
    ("library/busybox", "docker.io/library/busybox", "latest", None),
    ("docker.io/busybox", "docker.io/library/busybox", "latest", None),
    ("index.docker.io/library/busybox:x", "docker.io/library/busybox", "x", None),
    ("someone/app:v1", "docker.io/someone/app", "v1", None),
    ("registry.k8s.io/pause:3.9", "registry.k8s.io/pause", "3.9", None),
    ("localhost/busybox", "localhost/busybox", "latest", None),
    ("localhost:5000/a/b/c:t", "localhost:5000/a/b/c", "t", None),
    ("127.0.0.1:5000/x", "127.0.0.1:5000/x", "latest", None),
    (f"quay.io/a/b@{DIGEST}", "quay.io/a/b", None, DIGEST),
    (f"quay.io/a/b:t@{DIGEST}", "quay.io/a/b", "t", DIGEST),
])
def test_normalisation(ref, name, tag, digest):
    r = parse(ref)
    assert (r.name, r.tag, r.digest) == (name, tag, digest)


def test_string_forms():
    r = parse("busybox")
    assert str(r) == "docker.io/library/busybox:latest"
    assert r.object == "latest"
    d = parse(f"busybox@{DIGEST}")
    assert d.digested == f"docker.io/library/busybox@{DIGEST}" and d.object == DIGEST


@pytest.mark.parametrize("ref", ["", "UPPER", "a//b", "a:", "a@sha256:xyz", "-a", "a/b:t t", "a/B/c",
                                 "a:" + "x" * 200, " busybox"])
def test_invalid(ref):
    with pytest.raises(InvalidReference):
        parse(ref)


def test_is_id():
    assert is_id("sha256:abc") and is_id("abc123") and is_id(DIGEST)
    assert not is_id("busybox") and not is_id("sha256:xyz")
