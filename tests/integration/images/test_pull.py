"""Pulls from Debian's docker-registry on 127.0.0.1: plain HTTP, mirrors and rewrites, index by platform,
zstd layers, digest verification, concurrency, TLS and authentication."""

import asyncio
import json
import os
import stat
import urllib.request

import pytest

from cri.images import ImageStore, RegistriesConfig, pull_image
from cri.images.errors import AuthError, DigestMismatch, ManifestUnknown, PullError
from cri.images.progress import DONE, ProgressEvent
from nodeagent.testing.images import Entry, ImageSpec, build
from tests.integration.images.registry import PASSWORD, REFRESH_TOKEN, USER, free_port

pytestmark = [pytest.mark.root, pytest.mark.slow]


def _store(tmp_path, cfg: dict | None = None, name="images") -> ImageStore:
    return ImageStore(tmp_path / name, RegistriesConfig.from_dict(cfg or {}))


def _no_leftovers(store: ImageStore) -> None:
    assert os.listdir(store.tmp_dir) == []
    assert os.listdir(store.blobs.tmp_dir) == []


async def test_pull_plain_http(registry, images, tmp_path):
    store = _store(tmp_path)
    events: list[ProgressEvent] = []
    img = await pull_image(store, f"{registry.host}/test/configured:v1", progress=events.append)
    built = images.configured
    assert img.id == built.config_digest
    assert img.repo_tags == [f"{registry.host}/test/configured:v1"]
    assert img.repo_digests == [f"{registry.host}/test/configured@{built.manifest_digest}"]
    assert img.diff_ids == list(built.diff_ids)
    assert img.config["WorkingDir"] == "/work"
    assert (img.layers[1] / "work" / "data.txt").read_text() == "layer two\n"
    assert events[-1].phase == DONE and events[-1].ref.endswith("test/configured:v1")
    assert store.resolve(f"{registry.host}/test/configured:v1") == img
    assert store.resolve(img.repo_digests[0]) == img
    _no_leftovers(store)


async def test_pull_by_digest_and_unknown(registry, images, tmp_path):
    store = _store(tmp_path)
    built = images.httpd
    img = await pull_image(store, f"{registry.host}/test/httpd@{built.manifest_digest}")
    assert img.id == built.config_digest and img.repo_tags == []
    with pytest.raises(ManifestUnknown):
        await pull_image(store, f"{registry.host}/test/httpd@sha256:{'0' * 64}")
    with pytest.raises(ManifestUnknown):
        await pull_image(store, f"{registry.host}/test/nonexistent:v1")
    assert [i.id for i in store.list()] == [img.id]


async def test_pull_whiteouts_converted(registry, images, tmp_path):
    store = _store(tmp_path)
    img = await pull_image(store, f"{registry.host}/test/whiteout:v1")
    st = os.lstat(img.layers[-1] / "etc" / "removed.txt")
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
    assert os.getxattr(img.layers[-1] / "opaque", "trusted.overlay.opaque") == b"y"


async def test_index_resolved_by_host_platform(registry, images, tmp_path):
    store = _store(tmp_path)
    img = await pull_image(store, f"{registry.host}/test/multi:v1")
    assert img.id == images.httpd.config_digest  # the linux/amd64 entry; arm64 points at the whiteout image
    (digest,) = img.repo_digests
    assert img.manifest_digest == images.httpd.manifest_digest and not digest.endswith(img.manifest_digest)


def _zstd_layout(built, dest, kind: str = "zstd"):
    """A copy of `built`'s OCI layout with every layer recompressed as zstd (or left uncompressed: kind
    "none"): a new manifest, the same diff_ids."""
    import gzip
    import hashlib
    import shutil

    import zstandard

    shutil.copytree(built.oci_dir, dest)
    blobs = dest / "blobs" / "sha256"
    manifest = json.loads((blobs / built.manifest_digest[7:]).read_bytes())
    for layer in manifest["layers"]:
        data = gzip.decompress((blobs / layer["digest"][7:]).read_bytes())
        if kind == "zstd":
            data = zstandard.ZstdCompressor().compress(data)
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        media = "application/vnd.oci.image.layer.v1.tar" + ("+zstd" if kind == "zstd" else "")
        layer.update(mediaType=media, digest=f"sha256:{digest}", size=len(data))
    body = json.dumps(manifest).encode()
    digest = hashlib.sha256(body).hexdigest()
    (blobs / digest).write_bytes(body)
    index = json.loads((dest / "index.json").read_text())
    index["manifests"][0].update(digest=f"sha256:{digest}", size=len(body))
    (dest / "index.json").write_text(json.dumps(index))
    return dest


async def test_zstd_layers(registry, images, tmp_path):
    built = images.configured
    registry.push(_zstd_layout(built, tmp_path / "zstd"), built.spec.tag, "test/zstd", "v1")
    req = urllib.request.Request(f"http://{registry.host}/v2/test/zstd/manifests/v1",
                                 headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    manifest = json.loads(await asyncio.to_thread(lambda: urllib.request.urlopen(req, timeout=10).read()))
    assert all(layer["mediaType"].endswith("+zstd") for layer in manifest["layers"])
    store = _store(tmp_path)
    img = await pull_image(store, f"{registry.host}/test/zstd:v1")
    assert img.diff_ids == list(built.diff_ids)  # same content, verified after zstd decompression
    assert (img.layers[1] / "work" / "data.txt").read_text() == "layer two\n"


async def test_uncompressed_layers(registry, images, tmp_path):
    built = images.configured
    layout = _zstd_layout(built, tmp_path / "plain", "none")
    blobs = {f"sha256:{p.name}": p.read_bytes() for p in (layout / "blobs" / "sha256").iterdir()}
    top = json.loads((layout / "index.json").read_text())["manifests"][0]
    manifest = blobs[top["digest"]]
    assert all(la["mediaType"].endswith(".tar") for la in json.loads(manifest)["layers"])
    await asyncio.to_thread(registry.upload, "test/plain", "v1", blobs, manifest, top["mediaType"])
    img = await pull_image(_store(tmp_path), f"{registry.host}/test/plain:v1")
    assert img.diff_ids == list(built.diff_ids)
    assert img.size > built.size  # uncompressed blobs are what the manifest counts
    assert (img.layers[1] / "work" / "data.txt").read_text() == "layer two\n"


async def test_docker_schema2_manifest(registry, images, tmp_path):
    built = images.httpd
    registry.push(built.oci_dir, built.spec.tag, "test/v2s2", "v1", "--format", "v2s2")
    req = urllib.request.Request(f"http://{registry.host}/v2/test/v2s2/manifests/v1",
                                 headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    manifest = json.loads(await asyncio.to_thread(lambda: urllib.request.urlopen(req, timeout=10).read()))
    assert manifest["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"
    img = await pull_image(_store(tmp_path), f"{registry.host}/test/v2s2:v1")
    assert img.id == built.config_digest and img.diff_ids == list(built.diff_ids)
    assert img.config["Cmd"] == ["httpd", "-f", "-p", "80", "-h", "/var/www"]


async def test_mirror_serves_registry_k8s_io(registry, images, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"  # tried first, refused: the next endpoint is used
    store = _store(tmp_path,
                   {"mirrors": {"registry.k8s.io": {"endpoint": [dead, f"http://{registry.host}"]}}})
    img = await pull_image(store, "registry.k8s.io/pause:3.9")
    assert img.id == images.busybox.config_digest
    assert img.repo_tags == ["registry.k8s.io/pause:3.9"]
    assert img.repo_digests == [f"registry.k8s.io/pause@{images.busybox.manifest_digest}"]
    assert store.resolve("registry.k8s.io/pause:3.9") == img


async def test_mirror_rewrite_for_docker_hub_names(registry, images, tmp_path, monkeypatch):
    store = _store(tmp_path, {"mirrors": {"docker.io": {
        "endpoint": [f"http://{registry.host}"], "rewrite": {"^library/(.*)": "mirrored/$1"}}}})
    img = await pull_image(store, "busybox:mirror")
    assert img.repo_tags == ["docker.io/library/busybox:mirror"] and img.id == images.busybox.config_digest
    assert store.resolve("busybox:mirror") == img


async def test_wildcard_mirror(registry, images, tmp_path):
    store = _store(tmp_path, {"mirrors": {"*": {"endpoint": [f"http://{registry.host}"]}}})
    img = await pull_image(store, "example.invalid/test/httpd:v1")
    assert img.id == images.httpd.config_digest


async def test_digest_mismatch_rejected(registry, tmp_path):
    spec = ImageSpec("localhost/corrupt", "v1",
                     extra_layers=((Entry("corrupt.txt", data=os.urandom(4096)),),))
    built = build(spec, tmp_path / "src")
    registry.push(built.oci_dir, "v1", "test/corrupt", "v1")
    blob = registry.blob_path(built.layer_digests[-1])
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    store = _store(tmp_path)
    with pytest.raises(DigestMismatch):
        await pull_image(store, f"{registry.host}/test/corrupt:v1")
    assert store.list() == []
    assert not store.has_layer(built.diff_ids[-1]) and not store.blobs.has(built.layer_digests[-1])
    _no_leftovers(store)


async def test_concurrent_pulls_of_one_image(registry, images, tmp_path):
    a = _store(tmp_path)
    b = ImageStore(a.root, a.registries)  # a second store on the same root, as another process would be
    ref = f"{registry.host}/test/configured:v1"
    results = await asyncio.gather(pull_image(a, ref), pull_image(a, ref), pull_image(b, ref),
                                   pull_image(a, f"{registry.host}/test/busybox"))
    assert {r.id for r in results[:3]} == {images.configured.config_digest}
    assert sorted(os.listdir(a.layers_dir)) == sorted(d[7:] for d in images.configured.diff_ids)
    assert {i.id for i in a.list()} == {images.configured.config_digest, images.busybox.config_digest}
    _no_leftovers(a)


async def test_remove_keeps_shared_layers(registry, images, tmp_path):
    store = _store(tmp_path)
    busybox = await pull_image(store, f"{registry.host}/test/busybox")
    configured = await pull_image(store, f"{registry.host}/test/configured:v1")
    assert busybox.layers[0] == configured.layers[0]
    assert store.remove(f"{registry.host}/test/busybox:latest")
    assert configured.layers[0].is_dir() and configured.layers[1].is_dir()
    assert store.remove(configured.id)
    assert os.listdir(store.layers_dir) == [] and store.blobs.digests() == []


async def test_tls_with_ca_file(tls_registry, images, tmp_path):
    ref = f"{tls_registry.host}/test/busybox:latest"
    with pytest.raises(PullError):  # self-signed: refused without the CA, and plain HTTP is no way round
        await pull_image(_store(tmp_path, name="a"), ref)
    store = _store(tmp_path,
                   {"configs": {tls_registry.host: {"tls": {"ca_file": str(tls_registry.ca)}}}}, "b")
    assert (await pull_image(store, ref)).id == images.busybox.config_digest
    store = _store(tmp_path, {"configs": {tls_registry.host: {"tls": {"insecure_skip_verify": True}}}}, "c")
    assert (await pull_image(store, ref)).id == images.busybox.config_digest


async def test_basic_auth(basic_registry, images, tmp_path):
    ref = f"{basic_registry.host}/private/busybox:latest"
    with pytest.raises(AuthError) as e:
        await pull_image(_store(tmp_path, name="anon"), ref)
    # the registry's own reason, for the kubelet's ErrImagePull message
    assert "401 Unauthorized: UNAUTHORIZED: authentication required" in str(e.value)
    assert "none are configured" in str(e.value)
    with pytest.raises(AuthError) as e:
        await pull_image(_store(tmp_path, name="wrong"), ref, auth={"username": USER, "password": "wrong"})
    assert "401 Unauthorized: UNAUTHORIZED: authentication required (access denied)" in str(e.value)
    img = await pull_image(_store(tmp_path, name="cri"), ref, auth={"username": USER, "password": PASSWORD})
    assert img.id == images.busybox.config_digest
    import base64

    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    cfg = {"configs": {basic_registry.host: {"auth": {"auth": auth}}}}
    assert (await pull_image(_store(tmp_path, cfg, "yaml"), ref)).id == images.busybox.config_digest


async def test_bearer_token_auth(token_registry, images, tmp_path):
    ref = f"{token_registry.host}/private/busybox:latest"
    tokens = token_registry.token_server
    with pytest.raises(AuthError):
        await pull_image(_store(tmp_path, name="anon"), ref)
    tokens.requests.clear()
    img = await pull_image(_store(tmp_path, name="basic"), ref, auth={"username": USER, "password": PASSWORD})
    assert img.id == images.busybox.config_digest
    assert tokens.requests and tokens.requests[0]["auth"]
    assert tokens.requests[0]["scope"] == ["repository:private/busybox:pull"]
    tokens.requests.clear()
    cfg = {"configs": {token_registry.host: {"auth": {"identity_token": REFRESH_TOKEN}}}}
    assert (await pull_image(_store(tmp_path, cfg, "oauth"), ref)).id == images.busybox.config_digest
    assert tokens.requests[0] == {"method": "POST", "grant": "refresh_token"}


async def test_tls_client_certificate(mtls_registry, images, tmp_path):
    ref = f"{mtls_registry.host}/test/busybox:latest"
    ca = str(mtls_registry.ca)
    with pytest.raises(PullError):  # the server wants a client certificate
        await pull_image(_store(tmp_path, {"configs": {mtls_registry.host: {"tls": {"ca_file": ca}}}}, "a"),
                         ref)
    cert, key = map(str, mtls_registry.client_cert)
    cfg = {"configs": {mtls_registry.host: {"tls": {"ca_file": ca, "cert_file": cert, "key_file": key}}}}
    assert (await pull_image(_store(tmp_path, cfg, "b"), ref)).id == images.busybox.config_digest


async def test_registry_token_used_as_is(token_registry, images, tmp_path):
    ref = f"{token_registry.host}/private/busybox:latest"
    tokens = token_registry.token_server
    token = tokens.sign(["repository:private/busybox:pull"])
    tokens.requests.clear()
    img = await pull_image(_store(tmp_path), ref, auth={"registry_token": token})
    assert img.id == images.busybox.config_digest
    assert tokens.requests == []  # the token endpoint was never asked


async def test_broken_downloads_are_retried(registry, images, tmp_path):
    """A proxy in front of the registry cuts the first transfer of every blob halfway, then serves a 503."""
    import aiohttp
    from aiohttp import web

    upstream = f"http://{registry.host}"
    seen: dict[str, int] = {}

    async def handle(request: web.Request) -> web.StreamResponse:
        fwd = {k: v for k, v in request.headers.items() if k.lower() in ("accept", "authorization")}
        async with aiohttp.ClientSession() as s, s.get(upstream + request.path_qs, headers=fwd) as r:
            body = await r.read()
            headers = {k: v for k, v in r.headers.items()
                       if k.lower() in ("content-type", "docker-content-digest", "www-authenticate")}
            status = r.status
        if "/blobs/" in request.path and status == 200:
            n = seen[request.path] = seen.get(request.path, 0) + 1
            if n == 1:  # half the body, then the connection drops
                resp = web.StreamResponse(status=200, headers=headers)
                resp.content_length = len(body)
                await resp.prepare(request)
                await resp.write(body[: len(body) // 2])
                assert request.transport is not None
                request.transport.close()
                return resp
            if n == 2:
                return web.Response(status=503, text="try again")
        return web.Response(status=status, body=body, headers=headers)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        store = _store(tmp_path, {"mirrors": {"flaky.example": {"endpoint": [f"http://127.0.0.1:{port}"]}}})
        img = await pull_image(store, "flaky.example/test/configured:v1")
        assert img.id == images.configured.config_digest
        assert seen and all(n == 3 for n in seen.values())  # every blob: cut, 503, then whole
        _no_leftovers(store)
    finally:
        await runner.cleanup()
