"""The one protocol every backend implements, and the node facts they share."""

from __future__ import annotations

import dataclasses
from typing import Protocol

from netproxy.tracker import Changes, ProxyState


@dataclasses.dataclass(frozen=True)
class NodeConfig:
    """What a proxier knows about its node (all configurable, so tests use their own netns/addresses)."""

    node_name: str | None = None
    node_ips: tuple[str, ...] = ()  # addresses NodePorts answer on (empty: every local address)
    cluster_cidr: str | None = None  # pod CIDR: traffic from outside it to a ClusterIP is masqueraded
    masquerade_all: bool = False
    masquerade_bit: int = 14  # mark 0x4000, as kube-proxy
    prefix: str = "KUBE-"  # iptables chain prefix
    nft_table: str = "kube-proxy"  # nftables table name (family ip)

    @property
    def masq_mark(self) -> int:
        return 1 << self.masquerade_bit


@dataclasses.dataclass
class SyncResult:
    full: bool
    rules: int = 0  # rules (or IPVS destinations) written by this sync
    chains: int = 0
    detail: str = ""


class Proxier(Protocol):
    """A backend: one blocking `sync` that writes one transaction; `cleanup` removes everything it owns."""

    name: str

    def sync(self, state: ProxyState, changes: Changes, full: bool) -> SyncResult:
        """Make the kernel match `state`. `full`: rewrite everything (drift repair); else only `changes`."""
        ...

    def cleanup(self) -> None:
        ...
