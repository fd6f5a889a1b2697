"""ImageService: ListImages, ImageStatus, PullImage, RemoveImage, ImageFsInfo over cri.images."""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING

import grpc

from cri.images.puller import pull_image
from cri.proto import api_pb2 as pb
from cri.runtime.errors import FailedPrecondition, InvalidArgument, Unimplemented
from cri.server.boundary import rpc

if TYPE_CHECKING:
    from cri.images.store import Image, ImageStore
    from cri.runtime.service import Runtime


def image_message(img: Image) -> pb.Image:
    msg = pb.Image(id=img.id, repo_tags=list(img.repo_tags), repo_digests=list(img.repo_digests),
                   size=max(1, int(img.size)))
    msg.spec.image = img.id
    user = (img.config or {}).get("User", "") or ""
    u = user.split(":", 1)[0]
    if u.isdigit():
        msg.uid.value = int(u)
    elif u:
        msg.username = u
    return msg


class ImageService:
    """The ImageService servicer (registered beside the RuntimeService)."""

    def __init__(self, store: ImageStore | None, runtime: Runtime | None = None) -> None:
        self.store = store
        self.runtime = runtime

    def _need_store(self) -> ImageStore:
        if self.store is None:
            raise Unimplemented("the image store is not available in this build")
        return self.store

    @rpc
    async def ListImages(self, request, context):
        store = self._need_store()
        images = await asyncio.to_thread(store.list)
        want = request.filter.image.image if request.HasField("filter") else ""
        if want:
            hit = await asyncio.to_thread(store.resolve, want)
            images = [i for i in images if hit is not None and i.id == hit.id]
        return pb.ListImagesResponse(images=[image_message(i) for i in images])

    @rpc
    async def ImageStatus(self, request, context):
        store = self._need_store()
        if not request.image.image:
            raise InvalidArgument("image.image is required")
        img = await asyncio.to_thread(store.resolve, request.image.image)
        resp = pb.ImageStatusResponse()
        if img is not None:
            resp.image.CopyFrom(image_message(img))
            if request.verbose:
                resp.info["info"] = json.dumps({"config": img.config, "layers": [str(p) for p in img.layers]})
        return resp

    @rpc
    async def PullImage(self, request, context):
        store = self._need_store()
        if not request.image.image:
            raise InvalidArgument("image.image is required")
        a = request.auth
        auth = None
        if request.HasField("auth"):
            auth = {k: v for k, v in (("username", a.username), ("password", a.password), ("auth", a.auth),
                                      ("server_address", a.server_address),
                                      ("identity_token", a.identity_token),
                                      ("registry_token", a.registry_token)) if v}
        img = await pull_image(store, request.image.image, auth=auth)
        return pb.PullImageResponse(image_ref=img.id)

    @rpc
    async def RemoveImage(self, request, context):
        store = self._need_store()
        if not request.image.image:
            raise InvalidArgument("image.image is required")
        ref = request.image.image
        img = await asyncio.to_thread(store.resolve, ref)
        if (img is not None and self.runtime is not None
                and (len(img.repo_tags) <= 1 or ref not in img.repo_tags)):
            users = [c.id for c in self.runtime.containers.values()
                     if c.image_id == img.id
                     or any(v["id"] == img.id for v in (c.launch.get("image_volumes") or {}).values())]
            if users:
                # Its layers are the lower dirs of those containers' overlays: they must stay.
                raise FailedPrecondition(f"image {img.id} is in use by container {users[0]}")
        await asyncio.to_thread(store.remove, ref)  # idempotent: gone already is fine
        return pb.RemoveImageResponse()

    @rpc
    async def ImageFsInfo(self, request, context):
        store = self._need_store()
        mountpoint, used, inodes = await asyncio.to_thread(store.fs_info)
        u = pb.FilesystemUsage(timestamp=time.time_ns())
        u.fs_id.mountpoint = str(mountpoint)
        u.used_bytes.value = int(used)
        u.inodes_used.value = int(inodes)
        return pb.ImageFsInfoResponse(image_filesystems=[u])


__all__ = ["ImageService", "grpc"]
