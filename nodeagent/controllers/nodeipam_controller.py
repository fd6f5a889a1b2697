"""The node IPAM loop: every node without a podCIDR gets the next free subnet of the cluster range."""

from __future__ import annotations

from nodeagent.client.rest import ClientError
from nodeagent.controllers import nodeipam
from nodeagent.controllers.base import Controller, SharedInformers


class NodeIpamController(Controller):
    name = "nodeipam"
    service_account = "node-controller"
    workers = 1  # one allocator, one writer: no two nodes can get the same subnet

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.cidrs = nodeipam.CidrSet(self.options.cluster_cidr, self.options.node_cidr_mask_size)
        self.nodes = informers.get("nodes")
        self._given: dict[str, str] = {}  # node -> cidr we occupy for it
        self.nodes.add_handler(self._seen, lambda old, new: self._seen(new), self._deleted)

    def _seen(self, node: dict) -> None:
        name = node["metadata"]["name"]
        cidr = nodeipam.pod_cidr(node)
        if cidr:
            if self._given.get(name) != cidr and self.cidrs.occupy(cidr):
                self._given[name] = cidr
        elif self.options.allocate_node_cidrs:
            self.queue.add(name)

    def _deleted(self, node: dict) -> None:
        cidr = self._given.pop(node["metadata"]["name"], None)
        if cidr:
            self.cidrs.release(cidr)

    async def reconcile(self, key: str) -> None:
        node = self.nodes.get(key)
        if node is None or nodeipam.pod_cidr(node) or key in self._given:
            return
        try:
            cidr = self.cidrs.allocate()
        except nodeipam.CIDRSetFull as e:
            self.recorder.record(node, "Normal", "CIDRNotAvailable",
                                 f"Node {key} status is now: CIDRNotAvailable")
            raise RuntimeError(str(e)) from e
        try:
            await self.client.patch("nodes", key, {"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}})
        except ClientError as e:
            self.cidrs.release(cidr)
            if e.not_found:
                return
            self.recorder.record(node, "Warning", "CIDRAssignmentFailed", f"Node {key}: {e.message}")
            raise
        self._given[key] = cidr
        self.log.info("node %s: podCIDR %s", key, cidr)
