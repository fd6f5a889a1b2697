"""Image volumes (CRI Mount.image, KEP-4639): an image's root file system mounted read-only in a container.

The kubelet pulls the image and names it in `Mount.image` (no host_path); the runtime mounts the image's
layers as a read-only overlay under the container's directory (`<container dir>/image-mounts/<n>`, an
empty directory as the bottom layer, so a single-layer image is an overlay too) and bind-mounts it, or
its `image_sub_path`, at the container path, as containerd does. A mount it cannot honour (no such
image, host_path beside image, a sub path that is absolute, climbs out, or does not exist in the image)
is refused with InvalidArgument before anything is left mounted. The overlays go with the container's
other kernel objects (`unmount_all`), also after a daemon restart: they are found on disk, not recorded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Any

from cri.proto import api_pb2 as pb
from cri.runtime.errors import InvalidArgument
from kernel import syscalls as sc

MOUNTS_DIR = "image-mounts"
EMPTY_LAYER = "empty"


@dataclasses.dataclass(frozen=True)
class ImageVolume:
    index: int  # the mount's index in ContainerConfig.mounts
    image: Any  # cri.images.store.Image
    sub_path: str

    @property
    def ref(self) -> str:
        """What ContainerStatus reports for the mount: the image by digest where it has one, else its ID."""
        return self.image.repo_digests[0] if self.image.repo_digests else self.image.id


def is_image_mount(m: pb.Mount) -> bool:
    return m.HasField("image") and bool(m.image.image)


def check(m: pb.Mount, index: int, resolve: Any) -> ImageVolume:
    """The image a mount names, refused with InvalidArgument when the mount cannot be honoured."""
    field = f"config.mounts[{index}]"
    if not m.container_path.startswith("/"):
        raise InvalidArgument(f"{field}.container_path: must be absolute, got {m.container_path!r}")
    if m.host_path:
        raise InvalidArgument(f"{field}: host_path and image are exclusive (an image volume has none)")
    sub = m.image_sub_path
    if sub and (sub.startswith("/") or ".." in Path(sub).parts):
        raise InvalidArgument(f"{field}.image_sub_path: {sub!r} must be a relative path within the image")
    image = resolve(m.image.image)
    if image is None:
        raise InvalidArgument(f"{field}.image: image {m.image.image!r} is not present (pull it first)")
    return ImageVolume(index, image, sub)


def check_sub_path_only(m: pb.Mount, index: int) -> None:
    """image_sub_path means something only beside an image."""
    if m.image_sub_path:
        raise InvalidArgument(f"config.mounts[{index}].image_sub_path: set without image")


def mount(cdir: Path, vol: ImageVolume) -> str:
    """Mount the image read-only under the container's directory (blocking); returns the bind source. The
    caller unmounts through unmount_all on failure; a refused sub path leaves nothing mounted."""
    root = cdir / MOUNTS_DIR
    empty = root / EMPTY_LAYER
    empty.mkdir(parents=True, exist_ok=True)
    target = root / str(vol.index)
    target.mkdir()
    lower = ":".join([*(str(p) for p in reversed(vol.image.layers)), str(empty)])
    sc.mount("overlay", str(target), "overlay", sc.MS_RDONLY, f"lowerdir={lower}")
    if not vol.sub_path:
        return str(target)
    source = os.path.realpath(target / vol.sub_path)
    inside = source == str(target) or source.startswith(f"{target}/")
    if not inside or not os.path.exists(source):
        sc.umount(str(target), sc.MNT_DETACH)
        what = "leaves the image" if not inside else "does not exist in the image"
        raise InvalidArgument(f"config.mounts[{vol.index}].image_sub_path: {vol.sub_path!r} {what} "
                              f"{vol.image.id}")
    return source


def unmount_all(cdir: Path) -> None:
    """Unmount every image overlay of a container (idempotent: what is not mounted is skipped)."""
    root = cdir / MOUNTS_DIR
    with contextlib.suppress(FileNotFoundError):
        for d in root.iterdir():
            if d.name != EMPTY_LAYER and os.path.ismount(d):
                sc.umount(str(d), sc.MNT_DETACH)
