"""external-provisioner's skeleton, shared by the node's provisioners (local-path, CSI): claims, volumes and
classes watched, a claim or a volume queued as `claim:<ns>/<name>` or `volume:<name>`, and one sync that
provisions a claim this node serves, deletes a volume whose claim released it, or grows a bound volume.
The subclasses say which claims and volumes are theirs and how to provision, delete and resize."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.api import storage
from nodeagent.client.events import EventRecorder
from nodeagent.client.informer import Store, key_of, shared
from nodeagent.client.rest import Client
from nodeagent.kubelet.volumes.keyloop import KeyLoop

Obj = Mapping[str, Any]


async def on_this_node(client: Client, node_name: str, pv: Obj) -> bool:
    """The volume's nodeAffinity admits this node (a node-local driver's volumes live on the node they
    were made on), or it has none."""
    if not storage.node_affinity_terms(pv):
        return True
    node = await client.get("nodes", node_name)
    return storage.node_affinity_allows(pv, node)


class ProvisionerLoop(KeyLoop):
    """Subclasses implement `wants_claim`, `wants_delete`, `is_ours` and the three actions."""

    def __init__(self, client: Client, node_name: str, recorder: EventRecorder,
                 *more: Store) -> None:
        super().__init__()
        self.client = client
        self.node_name = node_name
        self.recorder = recorder
        # the process's informers (in `up`, the controller manager's and the other storage loops' too)
        self.claims = shared(client, "persistentvolumeclaims")
        self.volumes = shared(client, "persistentvolumes")
        self.classes = shared(client, "storageclasses")
        self.informers = (self.claims, self.volumes, self.classes, *more)
        self.claims.add_handler(self._claim, lambda old, new: self._claim(new), None)
        self.volumes.add_handler(self._volume, lambda old, new: self._volume(new), None)

    # -- what is ours ----------------------------------------------------------------------------------

    def wants_claim(self, pvc: Obj) -> bool:
        """A claim to provision here now."""
        raise NotImplementedError

    def wants_delete(self, pv: Obj) -> bool:
        """A volume whose claim let it go and whose reclaim policy says delete."""
        raise NotImplementedError

    def is_ours(self, pv: Obj) -> bool:
        """A volume this provisioner made (its changes concern us, and its claim's)."""
        raise NotImplementedError

    def resizes(self, pv: Obj) -> bool:
        """A bound volume whose growth this provisioner carries out."""
        return self.is_ours(pv)

    # -- what to do ------------------------------------------------------------------------------------

    async def provision(self, pvc: Obj) -> None:
        raise NotImplementedError

    async def delete(self, pv: Obj) -> None:
        raise NotImplementedError

    async def maybe_resize(self, pvc: Obj, pv: Obj) -> None:
        raise NotImplementedError

    # -- the loop --------------------------------------------------------------------------------------

    def _claim(self, pvc: Obj) -> None:
        self.add("claim:" + key_of(dict(pvc)))

    def _volume(self, pv: Obj) -> None:
        if self.is_ours(pv):
            self.add("volume:" + storage.meta(pv).get("name", ""))
            ref = storage.spec(pv).get("claimRef") or {}
            if ref.get("name"):
                self.add(f"claim:{ref.get('namespace')}/{ref['name']}")

    def poke_all(self) -> None:
        """A driver registered (and each resync): look at every claim and volume again."""
        for pvc in self.claims.list():
            self._claim(pvc)
        for pv in self.volumes.list():
            self._volume(pv)

    async def sync(self, key: str) -> None:
        kind, _, rest = key.partition(":")
        if kind == "volume":
            pv = self.volumes.get(rest)
            if pv is not None and self.wants_delete(pv):
                await self.delete(pv)
            return
        ns, _, name = rest.rpartition("/")
        pvc = self.claims.get(name, ns)
        if pvc is None:
            return
        if self.wants_claim(pvc):
            await self.provision(pvc)
            return
        vname = storage.spec(pvc).get("volumeName")
        pv = self.volumes.get(vname) if vname else None
        if pv is not None and self.resizes(pv):
            await self.maybe_resize(pvc, pv)
