"""The puller against an in-process fake registry (aiohttp): no root, no registry binary needed."""

import base64
import gzip
import hashlib
import io
import json
import tarfile

import pytest
from aiohttp import web

from cri.images import ImageStore, RegistriesConfig, pull_image
from cri.images.errors import AuthError, DigestMismatch, ManifestUnknown, PullError
from cri.images.manifest import DOCKER_LIST, OCI_MANIFEST, host_platform

TOKEN = "tok-123"


def _digest(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


def _image(content: bytes):
    """(blobs, manifest bytes, config digest, diff_id) of a one-layer image holding /hello = content."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("hello")
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    raw = buf.getvalue()
    layer = gzip.compress(raw, mtime=0)
    config = json.dumps({"architecture": host_platform().architecture, "os": "linux",
                         "config": {"Cmd": ["/hello"]},
                         "rootfs": {"type": "layers", "diff_ids": [_digest(raw)]}}).encode()
    manifest = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                      "digest": _digest(config), "size": len(config)},
                           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                       "digest": _digest(layer), "size": len(layer)}]}).encode()
    return {_digest(layer): layer, _digest(config): config}, manifest, _digest(config), _digest(raw)


class FakeRegistry:
    """Serves repositories {name: {tag: manifest bytes}} and blobs; optional bearer auth; failure knobs."""

    def __init__(self, auth: bool = False) -> None:
        self.auth = auth
        self.manifests: dict[str, dict[str, bytes]] = {}
        self.blobs: dict[str, bytes] = {}
        self.fail_manifests = False
        self.log: list[str] = []

    def add(self, name: str, tag: str, content: bytes, multi: bool = False):
        blobs, manifest, cid, diff_id = _image(content)
        self.blobs.update(blobs)
        self.blobs[_digest(manifest)] = manifest
        top = manifest
        if multi:  # a manifest list whose other entry is for another architecture
            other_blobs, other, _, _ = _image(b"wrong platform")
            self.blobs.update(other_blobs)
            self.blobs[_digest(other)] = other
            arch = host_platform().architecture
            top = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_LIST, "manifests": [
                {"mediaType": OCI_MANIFEST, "digest": _digest(other), "size": len(other),
                 "platform": {"os": "linux", "architecture": "s390x" if arch != "s390x" else "arm64"}},
                {"mediaType": OCI_MANIFEST, "digest": _digest(manifest), "size": len(manifest),
                 "platform": {"os": "linux", "architecture": arch}}]}).encode()
            self.blobs[_digest(top)] = top
        self.manifests.setdefault(name, {})[tag] = top
        return cid, diff_id, _digest(top)

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/token", self.token)
        app.router.add_get("/v2/{name:.+}/manifests/{ref}", self.manifest)
        app.router.add_get("/v2/{name:.+}/blobs/{digest}", self.blob)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = self.runner.addresses[0][1]
        return f"http://127.0.0.1:{self.port}"

    def _denied(self, request):
        if not self.auth or request.headers.get("Authorization") == f"Bearer {TOKEN}":
            return None
        realm = f"http://127.0.0.1:{self.port}/token"
        scope = f"repository:{request.match_info['name']}:pull"
        challenge = f'Bearer realm="{realm}",service="fake",scope="{scope}"'
        return web.Response(status=401, headers={"WWW-Authenticate": challenge})

    async def token(self, request):
        self.log.append(f"token {request.query.get('scope')}")
        good = "Basic " + base64.b64encode(b"u:p").decode()
        if request.headers.get("Authorization") != good:
            return web.json_response({}, status=401)
        return web.json_response({"token": TOKEN})

    async def manifest(self, request):
        if (denied := self._denied(request)) is not None:
            return denied
        name, ref = request.match_info["name"], request.match_info["ref"]
        self.log.append(f"manifest {name} {ref}")
        if self.fail_manifests:
            return web.Response(status=500)
        blob = self.blobs.get(ref) if ref.startswith("sha256:") else None
        body = self.manifests.get(name, {}).get(ref) or blob
        if body is None:
            return web.json_response({"errors": [{"code": "MANIFEST_UNKNOWN"}]}, status=404)
        return web.Response(body=body, content_type=json.loads(body)["mediaType"])

    async def blob(self, request):
        if (denied := self._denied(request)) is not None:
            return denied
        self.log.append(f"blob {request.match_info['digest']}")
        data = self.blobs.get(request.match_info["digest"])
        return web.Response(body=data) if data is not None else web.Response(status=404)

    async def stop(self):
        await self.runner.cleanup()


@pytest.fixture
async def fake():
    reg = FakeRegistry()
    await reg.start()
    yield reg
    await reg.stop()


def _store(tmp_path, url: str, domain: str = "example.test", **mirror) -> ImageStore:
    return ImageStore(tmp_path / "store", RegistriesConfig.from_dict(
        {"mirrors": {domain: {"endpoint": [url], **mirror}}}))


async def test_index_and_layers(fake, tmp_path):
    cid, diff_id, top = fake.add("app", "v1", b"right platform", multi=True)
    store = _store(tmp_path, f"http://127.0.0.1:{fake.port}")
    img = await pull_image(store, "example.test/app:v1")
    assert img.id == cid and img.diff_ids == [diff_id]
    assert img.repo_digests == [f"example.test/app@{top}"] and img.manifest_digest != top
    assert (img.layers[0] / "hello").read_bytes() == b"right platform"
    assert store.resolve(f"example.test/app@{top}") == img


async def test_bearer_token_flow(tmp_path):
    reg = FakeRegistry(auth=True)
    await reg.start()
    try:
        cid, _, _ = reg.add("private/app", "v1", b"secret")
        store = _store(tmp_path, f"http://127.0.0.1:{reg.port}")
        with pytest.raises(AuthError):
            await pull_image(store, "example.test/private/app:v1")
        cfg = {"mirrors": {"example.test": {"endpoint": [f"http://127.0.0.1:{reg.port}"]}},
               "configs": {f"127.0.0.1:{reg.port}": {"auth": {"username": "u", "password": "p"}}}}
        img = await pull_image(ImageStore(tmp_path / "s2", RegistriesConfig.from_dict(cfg)),
                               "example.test/private/app:v1")
        assert img.id == cid
        assert "token repository:private/app:pull" in reg.log
    finally:
        await reg.stop()


async def test_mirror_failure_falls_through_and_rewrite(fake, tmp_path):
    cid, _, _ = fake.add("mirrored/app", "v1", b"x")
    bad = FakeRegistry()
    await bad.start()
    bad.fail_manifests = True
    try:
        cfg = {"mirrors": {"example.test": {"endpoint": [f"http://127.0.0.1:{bad.port}",
                                                         f"http://127.0.0.1:{fake.port}"],
                                            "rewrite": {"^(.*)$": "mirrored/$1"}}}}
        store = ImageStore(tmp_path / "s", RegistriesConfig.from_dict(cfg))
        img = await pull_image(store, "example.test/app:v1")
        assert img.id == cid and img.repo_tags == ["example.test/app:v1"]
        assert bad.log == ["manifest mirrored/app v1"] and "manifest mirrored/app v1" in fake.log
    finally:
        await bad.stop()


async def test_unknown_and_corrupt(fake, tmp_path):
    store = _store(tmp_path, f"http://127.0.0.1:{fake.port}")
    with pytest.raises(ManifestUnknown):
        await pull_image(store, "example.test/missing:v1")
    _, diff_id, _ = fake.add("app", "v1", b"content")
    layer = next(d for d, b in fake.blobs.items() if b[:2] == b"\x1f\x8b")
    fake.blobs[layer] = gzip.compress(b"tampered", mtime=0)
    with pytest.raises(DigestMismatch):
        await pull_image(store, "example.test/app:v1")
    assert store.list() == [] and not store.has_layer(diff_id) and not store.blobs.has(layer)


async def test_tag_moves_to_new_content(fake, tmp_path):
    store = _store(tmp_path, f"http://127.0.0.1:{fake.port}")
    old, _, old_top = fake.add("app", "latest", b"one")
    await pull_image(store, "example.test/app")
    new, _, _ = fake.add("app", "latest", b"two")
    img = await pull_image(store, "example.test/app")
    assert img.id == new != old and img.repo_tags == ["example.test/app:latest"]
    left = store.resolve(old)
    assert left and left.repo_tags == [] and left.repo_digests == [f"example.test/app@{old_top}"]


async def test_server_errors_are_pull_errors(fake, tmp_path):
    fake.add("app", "v1", b"x")
    fake.fail_manifests = True
    with pytest.raises(PullError) as e:
        await pull_image(_store(tmp_path, f"http://127.0.0.1:{fake.port}"), "example.test/app:v1")
    assert "HTTP 500" in str(e.value)
