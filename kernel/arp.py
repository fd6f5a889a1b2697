"""ARP on an interface through an AF_PACKET socket: read requests, answer them, send gratuitous ARP.

No policy: which addresses to answer for, and when, is the caller's. The frames are RFC 826 Ethernet/IPv4
ARP; a gratuitous announcement is sent both as a request and as a reply (sender = target = the address),
as MetalLB's layer-2 speaker and arping -U/-A do, since hosts differ in which one updates their cache.
"""

from __future__ import annotations

import dataclasses
import fcntl
import ipaddress
import socket
import struct

from kernel.errors import KernelError

SIOCGIFHWADDR = 0x8927
ETH_P_ARP = 0x0806
ETH_P_IP = 0x0800
BROADCAST = b"\xff" * 6
REQUEST, REPLY = 1, 2
_ARP = struct.Struct("!HHBBH6s4s6s4s")  # htype ptype hlen plen op sha spa tha tpa
_ETH = struct.Struct("!6s6sH")


class ArpError(KernelError):
    pass


@dataclasses.dataclass(frozen=True)
class ArpPacket:
    op: int
    sender_mac: bytes
    sender_ip: str
    target_mac: bytes
    target_ip: str


def mac_bytes(text: str) -> bytes:
    return bytes(int(x, 16) for x in text.split(":"))


def mac_text(raw: bytes) -> str:
    return ":".join(f"{b:02x}" for b in raw)


def interface_mac(ifname: str) -> bytes:
    """The hardware address of `ifname` in the calling thread's network namespace (SIOCGIFHWADDR, so it
    holds on a thread switched into another namespace, where sysfs would still show the first one's)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            req = fcntl.ioctl(s.fileno(), SIOCGIFHWADDR, struct.pack("256s", ifname.encode()[:15]))
        except OSError as e:
            raise ArpError(f"{ifname}: no hardware address: {e}") from None
    return bytes(req[18:24])


def interface_of(address: str) -> str:
    """The name of the interface that holds `address` (IPv4), in this network namespace."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        for a in ipr.get_addr(family=socket.AF_INET):
            if a.get_attr("IFA_ADDRESS") == address:
                link = ipr.get_links(a["index"])[0]
                return str(link.get_attr("IFLA_IFNAME"))
    raise ArpError(f"no interface holds {address}")


def open_socket(ifname: str) -> socket.socket:
    """A non-blocking AF_PACKET socket bound to `ifname` that receives ARP frames."""
    try:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ARP))
    except OSError as e:
        raise ArpError(f"an ARP socket needs CAP_NET_RAW: {e}") from None
    try:
        s.bind((ifname, ETH_P_ARP))
        s.setblocking(False)
    except OSError as e:
        s.close()
        raise ArpError(f"ARP socket on {ifname}: {e}") from None
    return s


def parse(frame: bytes) -> ArpPacket | None:
    """An Ethernet/IPv4 ARP frame → its packet; anything else → None."""
    if len(frame) < _ETH.size + _ARP.size:
        return None
    _dst, _src, etype = _ETH.unpack_from(frame)
    if etype != ETH_P_ARP:
        return None
    htype, ptype, hlen, plen, op, sha, spa, tha, tpa = _ARP.unpack_from(frame, _ETH.size)
    if (htype, ptype, hlen, plen) != (1, ETH_P_IP, 6, 4) or op not in (REQUEST, REPLY):
        return None
    return ArpPacket(op, sha, str(ipaddress.IPv4Address(spa)), tha, str(ipaddress.IPv4Address(tpa)))


def frame(op: int, src_mac: bytes, sender_ip: str, target_mac: bytes, target_ip: str,
          eth_dst: bytes = BROADCAST) -> bytes:
    return _ETH.pack(eth_dst, src_mac, ETH_P_ARP) + _ARP.pack(
        1, ETH_P_IP, 6, 4, op, src_mac, ipaddress.IPv4Address(sender_ip).packed, target_mac,
        ipaddress.IPv4Address(target_ip).packed)


def reply_to(request: ArpPacket, mac: bytes) -> bytes:
    """`mac` is-at request.target_ip, unicast back to the asker."""
    return frame(REPLY, mac, request.target_ip, request.sender_mac, request.sender_ip, request.sender_mac)


def gratuitous(ip: str, mac: bytes) -> list[bytes]:
    """The announcement of `ip` at `mac`: a broadcast request and a broadcast reply."""
    return [frame(REQUEST, mac, ip, b"\x00" * 6, ip), frame(REPLY, mac, ip, BROADCAST, ip)]


def send(s: socket.socket, data: bytes) -> None:
    try:
        s.send(data)
    except BlockingIOError:
        pass  # the link's queue is full: ARP is retried by the asker, gratuitous ARP is repeated
    except OSError as e:
        raise ArpError(f"ARP send: {e}") from None


def default_route_interface() -> str:
    """The interface of the IPv4 default route, in this network namespace."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        for r in ipr.get_default_routes(family=socket.AF_INET):
            oif = r.get_attr("RTA_OIF")
            if oif:
                return str(ipr.get_links(oif)[0].get_attr("IFLA_IFNAME"))
    raise ArpError("no IPv4 default route: give the node's address (--node-ip) or --lb-interface")
