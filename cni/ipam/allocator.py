"""The pure round-robin allocator: which addresses to try, in which order. No I/O."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator

from cni.ipam.config import IP, Range


def candidates(ranges: tuple[Range, ...], last: IP | None) -> Iterator[IP]:
    """Every usable address of the range set once, starting right after `last` (round-robin)."""
    start_r, start_ip = 0, ranges[0].start
    if last is not None:
        for i, r in enumerate(ranges):
            if last in r:
                start_r, start_ip = i, last + 1
                if int(start_ip) > int(r.end):
                    start_r = (i + 1) % len(ranges)
                    start_ip = ranges[start_r].start
                break
    n = len(ranges)
    # walk from start_ip to the end of its range, the other ranges, then wrap to the beginning
    order = [(start_r, start_ip)] + [((start_r + k) % n, None) for k in range(1, n)] + [(start_r, None)]
    for idx, (ri, from_ip) in enumerate(order):
        r = ranges[ri]
        lo = from_ip or r.start
        hi = r.end
        if idx == len(order) - 1:  # the wrapped head of the first range
            if start_ip == r.start:
                return
            hi = start_ip - 1
        ip = lo
        while int(ip) <= int(hi):  # (one version: see config.IP)
            if r.usable(ip) and ip != r.subnet.network_address and not _is_broadcast(ip, r):
                yield ip
            ip += 1


def _is_broadcast(ip: IP, r: Range) -> bool:
    return isinstance(ip, ipaddress.IPv4Address) and ip == r.subnet.broadcast_address


def range_of(ranges: tuple[Range, ...], ip: IP) -> Range | None:
    for r in ranges:
        if ip in r:
            return r
    return None
