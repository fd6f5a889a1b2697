import json

import pytest

from cri.images import manifest as mf
from cri.images.errors import ManifestUnknown, UnsupportedMediaType


def _d(arch, os_="linux", variant=None, digest_char="a", media=mf.OCI_MANIFEST):
    p = {"os": os_, "architecture": arch}
    if variant:
        p["variant"] = variant
    return mf.Descriptor(media, "sha256:" + digest_char * 64, 10, p)


def test_select_by_host_platform():
    idx = [_d("arm", variant="v7", digest_char="1"), _d("amd64", digest_char="2"),
           _d("arm64", variant="v8", digest_char="3"), _d("unknown", "unknown", digest_char="4")]
    assert mf.select_manifest(idx, mf.Platform("linux", "amd64")).digest.endswith("2")
    assert mf.select_manifest(idx, mf.Platform("linux", "arm64", "v8")).digest.endswith("3")
    assert mf.select_manifest(idx, mf.Platform("linux", "arm", "v7")).digest.endswith("1")


def test_select_prefers_exact_variant_and_rejects_other_os():
    idx = [_d("arm", variant="v6", digest_char="1"), _d("arm", variant="v7", digest_char="2")]
    assert mf.select_manifest(idx, mf.Platform("linux", "arm", "v7")).digest.endswith("2")
    with pytest.raises(ManifestUnknown):
        mf.select_manifest([_d("amd64", os_="windows")], mf.Platform("linux", "amd64"))
    with pytest.raises(ManifestUnknown):
        mf.select_manifest([_d("s390x")], mf.Platform("linux", "amd64"))


def test_entry_without_platform_is_a_fallback():
    bare = mf.Descriptor(mf.OCI_MANIFEST, "sha256:" + "b" * 64, 1)
    assert mf.select_manifest([bare], mf.Platform("linux", "amd64")) == bare
    assert mf.select_manifest([bare, _d("amd64")], mf.Platform("linux", "amd64")).digest.endswith("a")


def test_host_platform_is_known():
    p = mf.host_platform()
    assert p.os == "linux" and p.architecture in {"amd64", "arm64", "arm", "386", "ppc64le",
                                                  "s390x", "riscv64"}


def _manifest(media=mf.DOCKER_MANIFEST, layer_type="application/vnd.docker.image.rootfs.diff.tar.gzip"):
    layer = {"mediaType": layer_type, "digest": "sha256:" + "d" * 64, "size": 9}
    return json.dumps({"schemaVersion": 2, "mediaType": media,
                       "config": {"mediaType": mf.DOCKER_CONFIG, "digest": "sha256:" + "c" * 64, "size": 3},
                       "layers": [layer]}).encode()


def test_parse_docker_and_oci_manifests():
    m = mf.parse_manifest(_manifest())
    assert m.media_type == mf.DOCKER_MANIFEST and m.config.size == 3 and m.layers[0].size == 9
    m = mf.parse_manifest(_manifest(mf.OCI_MANIFEST, "application/vnd.oci.image.layer.v1.tar+zstd"))
    assert m.media_type == mf.OCI_MANIFEST


def test_media_type_from_header_or_shape():
    body = json.loads(_manifest())
    del body["mediaType"]
    assert mf.media_type_of(json.dumps(body).encode(), mf.DOCKER_MANIFEST) == mf.DOCKER_MANIFEST
    assert mf.media_type_of(json.dumps(body).encode()) == mf.OCI_MANIFEST
    assert mf.is_index(mf.media_type_of(b'{"manifests": []}'))


def test_schema1_and_unknown_layers_rejected():
    with pytest.raises(UnsupportedMediaType):
        mf.parse_manifest(json.dumps({"schemaVersion": 1, "fsLayers": []}).encode())
    with pytest.raises(UnsupportedMediaType):
        mf.parse_manifest(_manifest(layer_type="application/x-foreign"))
