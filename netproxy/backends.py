"""Choosing a backend by mode name; imports stay lazy so one mode never loads another's libraries."""

from __future__ import annotations

from netproxy.proxier import NodeConfig, Proxier

MODES = ("iptables", "nftables", "ipvs")


def make_proxier(mode: str, node: NodeConfig, **options: str) -> Proxier:
    if mode == "iptables":
        from netproxy.iptables.proxier import IptablesProxier

        return IptablesProxier(node, **options)
    if mode == "nftables":
        from netproxy.nftables.proxier import NftablesProxier

        return NftablesProxier(node, **options)
    if mode == "ipvs":
        from netproxy.ipvs.proxier import IpvsProxier

        return IpvsProxier(node, **options)
    raise ValueError(f"unknown proxy mode {mode!r} (one of {', '.join(MODES)})")
