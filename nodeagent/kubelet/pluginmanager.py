"""The kubelet's plugin manager for CSI drivers: plugin watcher, registration, and the node's CSI info.

As the kubelet's pluginwatcher does, the plugins_registry directory is watched for sockets; for each new
one, the Registration service's GetInfo says what it is (a CSIPlugin, its name, its endpoint, the CSI
versions it speaks), the CSI handler asks the driver's NodeGetInfo, records the driver in this node's
CSINode (nodeID, topologyKeys, allocatable count) and on the Node (the topology labels, the
`csi.volume.kubernetes.io/nodeid` annotation), makes the driver usable by the CSI volume plugin, and
answers NotifyRegistrationStatus. A socket that goes away unregisters its driver. The CSINode exists from
the start (owned by the Node), with no drivers, as nodeinfomanager makes it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from csi import client as csiclient
from csi.proto import csi_pb2 as pb
from csi.proto import csi_pb2_grpc
from csi.proto import pluginregistration_pb2 as rpb
from csi.proto import pluginregistration_pb2_grpc as rgrpc
from nodeagent.api import csi as api
from nodeagent.client.rest import Client, ClientError
from nodeagent.kubelet.volumes.csi import Drivers

log = logging.getLogger("nodeagent.kubelet.plugins")

POLL = 1.0  # seconds between looks at the registry dir (the kubelet uses fsnotify)
RETRY = 10.0  # seconds before a failed registration is tried again
CALL_TIMEOUT = 10.0


class RegistrationError(Exception):
    pass


def sockets(directory: str) -> set[str]:
    """Unix sockets directly in the registry dir (blocking)."""
    try:
        entries = os.scandir(directory)
    except FileNotFoundError:
        return set()
    with entries:
        return {e.path for e in entries if not e.name.startswith(".") and _is_socket(e.path)}


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


def csinode_driver(name: str, node_id: str, topology: dict[str, str], max_volumes: int) -> dict[str, Any]:
    d: dict[str, Any] = {"name": name, "nodeID": node_id, "topologyKeys": sorted(topology) or None}
    if max_volumes > 0:
        d["allocatable"] = {"count": max_volumes}
    return {k: v for k, v in d.items() if v is not None}


def with_driver(csinode: dict[str, Any], entry: dict[str, Any] | None, name: str) -> dict[str, Any]:
    """The CSINode with the driver's entry replaced (or removed when entry is None)."""
    drivers = [d for d in (csinode.get("spec") or {}).get("drivers") or [] if d.get("name") != name]
    if entry is not None:
        drivers.append(entry)
    drivers.sort(key=lambda d: d["name"])
    return {**csinode, "spec": {**(csinode.get("spec") or {}), "drivers": drivers}}


class PluginManager:
    def __init__(self, client: Client, node_name: str, registry_dir: str, drivers: Drivers,
                 on_change: Callable[[str], None] | None = None) -> None:
        self.client = client
        self.node_name = node_name
        self.registry_dir = registry_dir
        self.drivers = drivers
        self.on_change = on_change  # a driver (re)registered or left: the volume plugin forgets its caps
        self.registered: dict[str, str] = {}  # socket path → driver name
        self._failed: dict[str, float] = {}  # socket path → when to try again
        self.ready = asyncio.Event()

    async def run(self) -> None:
        await asyncio.to_thread(Path(self.registry_dir).mkdir, parents=True, exist_ok=True)
        await self._ensure_csinode()
        loop = asyncio.get_running_loop()
        while True:
            present = await asyncio.to_thread(sockets, self.registry_dir)
            for path in sorted(present - set(self.registered)):
                if self._failed.get(path, 0) > loop.time():
                    continue
                try:
                    await self._register(path)
                    self._failed.pop(path, None)
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    self._failed[path] = loop.time() + RETRY
                    log.warning("plugin %s: registration failed, retrying in %.0fs: %s", path, RETRY, e)
            for path in sorted(set(self.registered) - present):
                name = self.registered.pop(path)
                await self._deregister(name)
            for path in set(self._failed) - present:
                del self._failed[path]
            self.ready.set()
            await asyncio.sleep(POLL)

    # -- registration -----------------------------------------------------------------------------------

    async def _register(self, path: str) -> None:
        async with csiclient.aio_channel(path) as ch:
            reg = rgrpc.RegistrationStub(ch)
            info = await reg.GetInfo(rpb.InfoRequest(), timeout=CALL_TIMEOUT)
            try:
                name = await self._validate_and_register(info, path)
            except (RegistrationError, grpc.RpcError, ClientError) as e:
                why = csiclient.describe(e) if isinstance(e, grpc.RpcError) else str(e)
                await reg.NotifyRegistrationStatus(rpb.RegistrationStatus(plugin_registered=False, error=why),
                                                   timeout=CALL_TIMEOUT)
                raise RegistrationError(why) from None
            await reg.NotifyRegistrationStatus(rpb.RegistrationStatus(plugin_registered=True),
                                               timeout=CALL_TIMEOUT)
        self.registered[path] = name
        log.info("registered CSI driver %s (%s) from %s", name, info.endpoint or path, path)

    async def _validate_and_register(self, info: rpb.PluginInfo, path: str) -> str:
        if info.type != "CSIPlugin":
            raise RegistrationError(f"plugin type {info.type!r} is not handled by this kubelet (only "
                                    "CSIPlugin)")
        if not info.name:
            raise RegistrationError("the plugin gave no name")
        if not any(v.split(".")[0] in ("1", "v1") for v in info.supported_versions):
            raise RegistrationError(f"none of the requested versions {list(info.supported_versions)} is "
                                    "supported (this kubelet speaks CSI 1.x)")
        other = next((p for p, n in self.registered.items() if n == info.name and p != path), None)
        if other is not None:
            raise RegistrationError(f"a CSI driver named {info.name} is already registered from {other}")
        endpoint = info.endpoint or path
        async with csiclient.aio_channel(endpoint) as ch:
            node = await csi_pb2_grpc.NodeStub(ch).NodeGetInfo(pb.NodeGetInfoRequest(), timeout=CALL_TIMEOUT)
        if not node.node_id:
            raise RegistrationError(f"driver {info.name}: NodeGetInfo returned no node_id")
        topology = dict(node.accessible_topology.segments)
        await self._record(info.name, csinode_driver(info.name, node.node_id, topology,
                                                     node.max_volumes_per_node), node.node_id, topology)
        self.drivers.add(info.name, endpoint)
        if self.on_change is not None:
            self.on_change(info.name)
        return info.name

    async def _deregister(self, name: str) -> None:
        self.drivers.remove(name)
        if self.on_change is not None:
            self.on_change(name)
        try:
            await self._record(name, None, "", {})
        except ClientError as e:
            log.warning("CSI driver %s left, but its CSINode entry stays: %s", name, e.message)
        log.info("CSI driver %s unregistered (its registration socket is gone)", name)

    # -- the API: CSINode and the Node ------------------------------------------------------------------

    async def _ensure_csinode(self) -> None:
        while True:
            try:
                await self.client.get("csinodes", self.node_name)
                return
            except ClientError as e:
                if not e.not_found:
                    raise
            try:
                node = await self.client.get("nodes", self.node_name)
                await self.client.create("csinodes", {
                    "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                    "metadata": {"name": self.node_name, "ownerReferences": [{
                        "apiVersion": "v1", "kind": "Node", "name": self.node_name,
                        "uid": node["metadata"]["uid"]}]},
                    "spec": {"drivers": []}})
                return
            except ClientError as e:
                if e.already_exists:
                    return
                if not e.not_found:
                    raise
            await asyncio.sleep(POLL)  # the Node is not registered yet

    async def _record(self, name: str, entry: dict[str, Any] | None, node_id: str,
                      topology: dict[str, str]) -> None:
        """The driver's entry in CSINode (None: removed), and the Node's nodeid annotation and topology
        labels, each written with retries on conflicts."""
        for _ in range(10):
            cur = await self.client.get("csinodes", self.node_name)
            try:
                await self.client.update("csinodes", with_driver(cur, entry, name))
                break
            except ClientError as e:
                if not e.conflict:
                    raise
        node = await self.client.get("nodes", self.node_name)
        ann = (node["metadata"].get("annotations") or {}).get(api.ANN_NODE_IDS) or "{}"
        try:
            ids = json.loads(ann)
        except ValueError:
            ids = {}
        if entry is None:
            ids.pop(name, None)
        else:
            ids[name] = node_id
        value = json.dumps(ids, sort_keys=True) if ids else None
        patch: dict[str, Any] = {"metadata": {"annotations": {api.ANN_NODE_IDS: value}}}
        if topology:
            patch["metadata"]["labels"] = topology
        await self.client.patch("nodes", self.node_name, patch)
