"""CIDRs as the API uses them (a cluster's pod CIDR, NetworkPolicy ipBlocks): one subnet test for both
families."""

from __future__ import annotations

import ipaddress

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def subnet_of(sub: Network, net: Network) -> bool:
    """`sub` lies inside `net`; False (where ipaddress raises TypeError) when their families differ."""
    if isinstance(sub, ipaddress.IPv4Network) and isinstance(net, ipaddress.IPv4Network):
        return sub.subnet_of(net)
    if isinstance(sub, ipaddress.IPv6Network) and isinstance(net, ipaddress.IPv6Network):
        return sub.subnet_of(net)
    return False
