"""Typed errors of the image store; the CRI boundary maps them to gRPC codes."""

from __future__ import annotations


class ImageError(Exception):
    """Base of every image store error."""


class ImageNotFound(ImageError):
    """No image matches the reference (CRI: NOT_FOUND)."""


class InvalidReference(ImageError, ValueError):
    """The reference is not a valid image name, tag, digest or id (CRI: INVALID_ARGUMENT)."""


class AmbiguousReference(InvalidReference):
    """An image id prefix matches more than one image."""


class PullError(ImageError):
    """Fetching an image from a registry failed (every endpoint was tried)."""


class ManifestUnknown(PullError):
    """Every endpoint answered that the image (or its platform variant) does not exist."""


class AuthError(PullError):
    """The registry refused the credentials (or none were given and it wants some)."""


class DigestMismatch(PullError):
    """Content did not hash to the digest that names it: it is rejected, never stored."""


class UnsupportedMediaType(PullError):
    """A manifest or layer type this store cannot use (e.g. Docker schema1, foreign layers)."""


class ArchiveError(ImageError):
    """An archive is not an OCI layout or docker-archive, or is inconsistent."""


class CorruptLayer(ImageError):
    """A layer is not a readable (gzip/zstd compressed) tar stream."""


class UnsafeLayer(ImageError):
    """A layer tar could not be unpacked safely (only raised for unrecoverable cases)."""
