"""Image references, normalised the way Docker and containerd do (`busybox` =
`docker.io/library/busybox:latest`)."""

from __future__ import annotations

import dataclasses
import re

from cri.images.errors import InvalidReference

DEFAULT_DOMAIN = "docker.io"
LEGACY_DOMAINS = ("index.docker.io", "registry-1.docker.io")
OFFICIAL_PREFIX = "library/"
DEFAULT_TAG = "latest"

_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*")
_DOMAIN = re.compile(r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)"
                     r"(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*"
                     r"(?::[0-9]+)?|\[[0-9a-fA-F:.]+\](?::[0-9]+)?")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}")
_HEX = re.compile(r"[a-f0-9]{1,64}")


@dataclasses.dataclass(frozen=True)
class Reference:
    """A normalised reference: `domain/path` plus a tag and/or a digest."""

    domain: str
    path: str
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        """Fully qualified repository name, e.g. `docker.io/library/busybox`."""
        return f"{self.domain}/{self.path}"

    @property
    def tagged(self) -> str | None:
        return f"{self.name}:{self.tag}" if self.tag else None

    @property
    def digested(self) -> str | None:
        return f"{self.name}@{self.digest}" if self.digest else None

    @property
    def object(self) -> str:
        """What to ask the registry's manifest endpoint for: the digest if given, else the tag."""
        return self.digest or self.tag or DEFAULT_TAG

    def __str__(self) -> str:
        s = self.name
        if self.tag:
            s += f":{self.tag}"
        if self.digest:
            s += f"@{self.digest}"
        return s


def split_domain(name: str) -> tuple[str, str]:
    """Split a repository name into (domain, path) with Docker's defaults."""
    first, sep, rest = name.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost" or first.startswith("[")
                or first != first.lower()):
        domain, path = first, rest
    else:
        domain, path = DEFAULT_DOMAIN, name
    if domain in LEGACY_DOMAINS:
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and "/" not in path:
        path = OFFICIAL_PREFIX + path
    return domain, path


def parse(ref: str, default_tag: bool = True) -> Reference:
    """Parse and normalise `ref`; a missing tag becomes `latest` unless a digest is given."""
    if not ref or len(ref) > 4096 or ref != ref.strip():
        raise InvalidReference(f"invalid reference {ref!r}")
    name, digest = ref, None
    if "@" in ref:
        name, _, digest = ref.partition("@")
        if not _DIGEST.fullmatch(digest):
            raise InvalidReference(f"invalid digest in reference {ref!r}")
    tag = None
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
        if not _TAG.fullmatch(tag):
            raise InvalidReference(f"invalid tag {tag!r} in reference {ref!r}")
    if not name:
        raise InvalidReference(f"invalid reference {ref!r}: empty name")
    domain, path = split_domain(name)
    if not _DOMAIN.fullmatch(domain):
        raise InvalidReference(f"invalid registry host {domain!r} in reference {ref!r}")
    for comp in path.split("/"):
        if not _COMPONENT.fullmatch(comp):
            raise InvalidReference(f"invalid repository name {name!r} in reference {ref!r} "
                                   "(lowercase letters, digits and separators only)")
    if len(domain) + 1 + len(path) > 255:
        raise InvalidReference(f"repository name too long in {ref!r}")
    if tag is None and digest is None and default_tag:
        tag = DEFAULT_TAG
    return Reference(domain, path, tag, digest)


def is_id(ref: str) -> bool:
    """True for `sha256:<hex>` (full or prefix) or a bare hex string that could be an id prefix."""
    if ref.startswith("sha256:"):
        return bool(_HEX.fullmatch(ref[7:]))
    return bool(_HEX.fullmatch(ref))
