"""The container runtime's image store and puller: content-addressed blobs, shared unpacked layers
(overlayfs lowerdirs), OCI distribution pulls with mirrors and auth, and local archive import."""

from cri.images.errors import ImageNotFound, InvalidReference, PullError
from cri.images.puller import pull_image
from cri.images.registries import RegistriesConfig
from cri.images.store import Image, ImageStore

__all__ = ["Image", "ImageNotFound", "ImageStore", "InvalidReference", "PullError", "RegistriesConfig",
           "pull_image"]
