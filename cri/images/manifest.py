"""Manifest and index media types, parsing, and platform selection (pure logic, no I/O)."""

from __future__ import annotations

import dataclasses
import json
import platform as _platform

from cri.images.errors import ManifestUnknown, PullError, UnsupportedMediaType

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_SCHEMA1 = ("application/vnd.docker.distribution.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v1+prettyjws")

INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))

LAYER_TYPES = {
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.oci.image.layer.nondistributable.v1.tar",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.docker.image.rootfs.diff.tar.zstd",
    "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip",
}

_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "armv7l": "arm",
         "armv6l": "arm", "i386": "386", "i686": "386", "ppc64le": "ppc64le", "s390x": "s390x",
         "riscv64": "riscv64"}


@dataclasses.dataclass(frozen=True)
class Platform:
    os: str = "linux"
    architecture: str = "amd64"
    variant: str = ""

    def __str__(self) -> str:
        return f"{self.os}/{self.architecture}" + (f"/{self.variant}" if self.variant else "")


def host_platform() -> Platform:
    machine = _platform.machine()
    arch = _ARCH.get(machine, machine)
    variant = {"armv7l": "v7", "armv6l": "v6", "aarch64": "v8", "arm64": "v8"}.get(machine, "")
    return Platform("linux", arch, variant)


@dataclasses.dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int
    platform: dict | None = None
    annotations: dict | None = None
    urls: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, d: dict) -> Descriptor:
        try:
            return cls(d.get("mediaType", ""), d["digest"], int(d.get("size", -1)), d.get("platform"),
                       d.get("annotations"), tuple(d.get("urls") or ()))
        except (KeyError, TypeError, ValueError) as e:
            raise PullError(f"malformed descriptor {d!r}: {e}") from None


@dataclasses.dataclass(frozen=True)
class Manifest:
    media_type: str
    config: Descriptor
    layers: tuple[Descriptor, ...]


def media_type_of(body: bytes | dict, content_type: str = "") -> str:
    """The media type from the document itself, else the HTTP Content-Type, else its shape."""
    doc = body if isinstance(body, dict) else _load(body)
    mt = doc.get("mediaType") or content_type.split(";")[0].strip()
    if mt in INDEX_TYPES or mt in MANIFEST_TYPES or mt in DOCKER_SCHEMA1:
        return mt
    if "manifests" in doc:
        return OCI_INDEX
    if "layers" in doc and "config" in doc:
        return OCI_MANIFEST
    if "fsLayers" in doc or doc.get("schemaVersion") == 1:
        return DOCKER_SCHEMA1[0]
    raise UnsupportedMediaType(f"unknown manifest type {mt!r}")


def _load(body: bytes) -> dict:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise PullError(f"manifest is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise PullError("manifest is not a JSON object")
    return doc


def is_index(media_type: str) -> bool:
    return media_type in INDEX_TYPES


def parse_manifest(body: bytes, content_type: str = "") -> Manifest:
    doc = _load(body)
    mt = media_type_of(doc, content_type)
    if mt in DOCKER_SCHEMA1:
        raise UnsupportedMediaType("Docker schema1 manifests are not supported (deprecated since 2017)")
    if mt in INDEX_TYPES:
        raise PullError("expected an image manifest, got an index")
    try:
        config = Descriptor.from_json(doc["config"])
        layers = tuple(Descriptor.from_json(layer) for layer in doc["layers"])
    except (KeyError, TypeError) as e:
        raise PullError(f"malformed manifest: missing {e}") from None
    for layer in layers:
        if layer.media_type and layer.media_type not in LAYER_TYPES:
            raise UnsupportedMediaType(f"layer {layer.digest} has unsupported media type {layer.media_type}")
    return Manifest(mt, config, layers)


def parse_index(body: bytes) -> list[Descriptor]:
    doc = _load(body)
    return [Descriptor.from_json(m) for m in doc.get("manifests") or []]


def _arch_matches(p: dict, want: Platform) -> int:
    """0 = no match, 1 = os/arch match, 2 = exact variant match (higher is better)."""
    if p.get("os", "linux") != want.os or p.get("architecture") != want.architecture:
        return 0
    variant = p.get("variant", "")
    if variant == want.variant:
        return 2
    if want.architecture == "arm64" and variant in ("", "v8"):
        return 2
    if want.architecture == "arm" and variant and want.variant and variant < want.variant:
        return 1  # an armv6 image runs on armv7
    return 1 if not variant else 0


def platform_matches(p: dict, want: Platform | None = None) -> bool:
    return _arch_matches(p, want or host_platform()) > 0


def select_manifest(manifests: list[Descriptor], want: Platform | None = None) -> Descriptor:
    """Pick the index entry for `want` (default: this host); entries without a platform are a fallback."""
    want = want or host_platform()
    best: tuple[int, int, Descriptor] | None = None
    for i, m in enumerate(manifests):
        if m.media_type and m.media_type not in INDEX_TYPES + MANIFEST_TYPES:
            continue
        if m.platform is None:
            score = 0
        else:
            score = _arch_matches(m.platform, want)
            if not score:
                continue
            score += 1
        if best is None or score > best[0]:
            best = (score, -i, m)
    if best is None:
        have = ", ".join(f"{(m.platform or {}).get('os')}/{(m.platform or {}).get('architecture')}"
                         for m in manifests) or "none"
        raise ManifestUnknown(f"no manifest for platform {want} (index has: {have})")
    return best[2]
