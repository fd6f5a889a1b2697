"""host-local's `ipam` section: ranges (range sets), routes, dns, dataDir."""

from __future__ import annotations

import ipaddress

from cni.errors import INVALID_CONFIG, CNIError

TYPE_CHECKING = False  # typing is not imported at run time: the exec'd path stays lean
if TYPE_CHECKING:
    from typing import Any

DEFAULT_DATA_DIR = "/var/lib/cni/networks"
# Addresses of one version compare as their integers do; the checks compare int()s, which a type
# checker can follow, where it cannot see that both sides are of the same version.
IP = ipaddress.IPv4Address | ipaddress.IPv6Address
Net = ipaddress.IPv4Network | ipaddress.IPv6Network


class Range:
    __slots__ = ("subnet", "start", "end", "gateway")

    def __init__(self, subnet: Net, start: IP, end: IP, gateway: IP | None) -> None:
        self.subnet, self.start, self.end, self.gateway = subnet, start, end, gateway

    def __repr__(self) -> str:
        return f"Range({self.subnet}, {self.start}-{self.end}, gw={self.gateway})"

    def __contains__(self, ip: IP) -> bool:
        return ip.version == self.start.version and int(self.start) <= int(ip) <= int(self.end)

    def usable(self, ip: IP) -> bool:
        return ip in self and ip != self.gateway


class IPAMConfig:
    __slots__ = ("name", "range_sets", "routes", "dns", "data_dir")

    def __init__(self, name: str, range_sets: tuple[tuple[Range, ...], ...],
                 routes: tuple[dict[str, Any], ...], dns: dict[str, Any], data_dir: str) -> None:
        self.name, self.range_sets, self.routes = name, range_sets, routes
        self.dns, self.data_dir = dns, data_dir


def _ip(v: Any, what: str) -> IP:
    try:
        return ipaddress.ip_address(str(v))
    except ValueError:
        raise CNIError(INVALID_CONFIG, f"invalid {what}", str(v)) from None


def parse_range(r: dict[str, Any]) -> Range:
    if not isinstance(r, dict) or "subnet" not in r:
        raise CNIError(INVALID_CONFIG, "a range needs a subnet", str(r))
    try:
        subnet = ipaddress.ip_network(str(r["subnet"]), strict=False)
    except ValueError:
        raise CNIError(INVALID_CONFIG, "invalid subnet", str(r["subnet"])) from None
    if subnet.num_addresses < 4 and subnet.version == 4:
        raise CNIError(INVALID_CONFIG, "subnet too small", str(subnet))
    first = subnet.network_address + 1
    last = subnet.broadcast_address - 1 if subnet.version == 4 else subnet.broadcast_address
    start = _ip(r["rangeStart"], "rangeStart") if r.get("rangeStart") else first
    end = _ip(r["rangeEnd"], "rangeEnd") if r.get("rangeEnd") else last
    gw = _ip(r["gateway"], "gateway") if r.get("gateway") else first
    for ip, what in ((start, "rangeStart"), (end, "rangeEnd")):
        if ip.version != subnet.version or not (int(first) <= int(ip) <= int(last)):
            raise CNIError(INVALID_CONFIG, f"{what} {ip} not in subnet {subnet}")
    if int(start) > int(end):
        raise CNIError(INVALID_CONFIG, f"rangeStart {start} is after rangeEnd {end}")
    return Range(subnet, start, end, gw)


def parse(net: dict[str, Any]) -> IPAMConfig:
    ipam = net.get("ipam")
    if not isinstance(ipam, dict):
        raise CNIError(INVALID_CONFIG, "missing ipam section")
    raw_sets = ipam.get("ranges")
    if raw_sets is None and ipam.get("subnet"):
        raw_sets = [[{k: ipam[k] for k in ("subnet", "rangeStart", "rangeEnd", "gateway") if k in ipam}]]
    if not raw_sets or not isinstance(raw_sets, list):
        raise CNIError(INVALID_CONFIG, "no IP ranges specified")
    sets = []
    for rs in raw_sets:
        if not isinstance(rs, list) or not rs:
            raise CNIError(INVALID_CONFIG, "a range set must be a non-empty list")
        ranges = tuple(parse_range(r) for r in rs)
        if len({r.subnet.version for r in ranges}) != 1:
            raise CNIError(INVALID_CONFIG, "a range set mixes IPv4 and IPv6")
        for i, a in enumerate(ranges):
            for b in ranges[i + 1:]:
                if int(a.start) <= int(b.end) and int(b.start) <= int(a.end):
                    raise CNIError(INVALID_CONFIG, f"ranges {a.subnet} and {b.subnet} overlap")
        sets.append(ranges)
    routes = ipam.get("routes") or []
    if not isinstance(routes, list) or not all(isinstance(r, dict) and "dst" in r for r in routes):
        raise CNIError(INVALID_CONFIG, "invalid routes")
    return IPAMConfig(
        name=str(net.get("name", "")),
        range_sets=tuple(sets),
        routes=tuple(routes),
        dns=dict(net.get("dns") or {}),
        data_dir=str(ipam.get("dataDir") or DEFAULT_DATA_DIR),
    )
