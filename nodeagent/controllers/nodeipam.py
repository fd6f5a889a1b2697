"""Node IPAM decisions: a podCIDR per node carved out of --cluster-cidr (the range allocator's CidrSet).

The cluster range is cut into subnets of --node-cidr-mask-size; allocation hands
out the next free one after the last given (so a released subnet is not reused at
once), occupying the ones nodes already carry.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from nodeagent.api.cidrs import subnet_of


class CIDRSetFull(Exception):
    """Every subnet of the cluster range is taken."""


class CidrSet:
    def __init__(self, cluster_cidr: str, mask_size: int) -> None:
        self.net = ipaddress.ip_network(cluster_cidr, strict=False)
        if mask_size < self.net.prefixlen or mask_size > self.net.max_prefixlen:
            raise ValueError(f"node mask /{mask_size} does not fit in {self.net}")
        if mask_size - self.net.prefixlen > 24:
            raise ValueError(f"{self.net} split into /{mask_size} is too many subnets")
        self.mask = mask_size
        self.size = 1 << (mask_size - self.net.prefixlen)
        self._step = 1 << (self.net.max_prefixlen - mask_size)
        self._used: set[int] = set()
        self._next = 0

    def _index(self, cidr: str) -> int | None:
        try:
            sub = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            return None
        if sub.prefixlen != self.mask or not subnet_of(sub, self.net):
            return None
        return (int(sub.network_address) - int(self.net.network_address)) // self._step

    def _cidr(self, i: int) -> str:
        addr = ipaddress.ip_address(int(self.net.network_address) + i * self._step)
        return f"{addr}/{self.mask}"

    def occupy(self, cidr: str) -> bool:
        """Mark a node's existing podCIDR taken; False when it is not one of ours."""
        i = self._index(cidr)
        if i is None:
            return False
        self._used.add(i)
        return True

    def release(self, cidr: str) -> None:
        i = self._index(cidr)
        if i is not None:
            self._used.discard(i)

    def allocate(self) -> str:
        for k in range(self.size):
            i = (self._next + k) % self.size
            if i not in self._used:
                self._used.add(i)
                self._next = (i + 1) % self.size
                return self._cidr(i)
        raise CIDRSetFull(f"no free /{self.mask} left in {self.net}")

    @property
    def used(self) -> int:
        return len(self._used)


def pod_cidr(node: Mapping[str, Any]) -> str | None:
    spec = node.get("spec") or {}
    return spec.get("podCIDR") or next(iter(spec.get("podCIDRs") or []), None)
