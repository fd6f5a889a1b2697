"""Session registries (Debian's docker-registry on 127.0.0.1) with the harness images pushed into them."""

import json
import shutil
from pathlib import Path

import pytest

from tests.integration.images.registry import REGISTRY_BIN, Registry


def _start(tmp_path_factory, name, **kw):
    if not Path(REGISTRY_BIN).exists() or not shutil.which("skopeo"):
        pytest.skip("docker-registry and skopeo are needed (make install adds them)")
    return Registry(tmp_path_factory.mktemp(name), **kw)


def make_index_layout(dest: Path, amd64, other, tag: str = "multi", nested: bool = True) -> Path:
    """An OCI layout whose index points at `amd64` for this host's platform (linux/amd64 on this machine)
    and `other` for another one; `nested`: index.json -> an index blob -> manifests, else index.json lists
    the manifests itself."""
    from cri.images.manifest import host_platform

    here = host_platform().architecture
    foreign = "s390x" if here != "s390x" else "arm64"
    dest.mkdir(parents=True)
    blobs = dest / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    for built in (amd64, other):
        for f in (built.oci_dir / "blobs" / "sha256").iterdir():
            shutil.copy(f, blobs / f.name)
    manifests = []
    for built, arch in ((other, foreign), (amd64, here)):
        size = (built.oci_dir / "blobs" / "sha256" / built.manifest_digest[7:]).stat().st_size
        manifests.append({"mediaType": "application/vnd.oci.image.manifest.v1+json",
                          "digest": built.manifest_digest, "size": size,
                          "platform": {"os": "linux", "architecture": arch}})
    index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": manifests}).encode()
    import hashlib

    if not nested:
        (dest / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        for m in manifests:
            m["annotations"] = {"io.containerd.image.name": f"localhost/multi:{tag}"}
        (dest / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": manifests}))
        return dest
    digest = hashlib.sha256(index).hexdigest()
    (blobs / digest).write_bytes(index)
    (dest / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (dest / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.index.v1+json", "digest": f"sha256:{digest}",
        "size": len(index),
        "annotations": {"org.opencontainers.image.ref.name": tag}}]}))
    return dest


@pytest.fixture(scope="session")
def registry(tmp_path_factory, images):
    """Plain-HTTP registry holding test/{busybox,configured,whiteout,httpd},
    pause:3.9 and mirrored/busybox."""
    reg = _start(tmp_path_factory, "registry")
    try:
        for built, name in ((images.busybox, "test/busybox"), (images.configured, "test/configured"),
                            (images.whiteout, "test/whiteout"), (images.httpd, "test/httpd")):
            reg.push(built.oci_dir, built.spec.tag, name, built.spec.tag)
        reg.push(images.busybox.oci_dir, "latest", "pause", "3.9")
        reg.push(images.busybox.oci_dir, "latest", "mirrored/busybox", "mirror")
        layout = make_index_layout(tmp_path_factory.mktemp("index") / "oci", images.httpd, images.whiteout)
        reg.push(layout, "multi", "test/multi", "v1", all_images=True)
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="session")
def tls_registry(tmp_path_factory, images):
    reg = _start(tmp_path_factory, "tls-registry", tls=True)
    try:
        reg.push(images.busybox.oci_dir, "latest", "test/busybox", "latest")
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="session")
def mtls_registry(tmp_path_factory, images):
    """TLS registry that also requires a client certificate from its CA."""
    reg = _start(tmp_path_factory, "mtls-registry", tls=True, client_certs=True)
    try:
        reg.push(images.busybox.oci_dir, "latest", "test/busybox", "latest")
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="session")
def basic_registry(tmp_path_factory, images):
    reg = _start(tmp_path_factory, "basic-registry", htpasswd=True)
    try:
        reg.push(images.busybox.oci_dir, "latest", "private/busybox", "latest")
        yield reg
    finally:
        reg.stop()


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory, images):
    reg = _start(tmp_path_factory, "token-registry", token=True)
    try:
        reg.push(images.busybox.oci_dir, "latest", "private/busybox", "latest")
        yield reg
    finally:
        reg.stop()
