"""A minimal stdlib rtnetlink writer for the fixed requests on the ADD/DEL hot path.

pyroute2 costs 0.2-0.6 s to import and, through its sync API, a socket + asyncio loop
and ~1 ms per request here. The hot path is a handful of fixed, write-only requests
(veth pair, gateway address, link up, addresses, routes, link delete), so they are
encoded here and sent in batches on raw NETLINK_ROUTE sockets, every ACK checked;
what a link looks like is read from sysfs. pyroute2 (`kernel.netlink`) keeps the rest:
creating and tuning bridges, VLANs, and the CHECK/forceAddress queries.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct

from kernel.errors import KernelError

RTM_NEWLINK, RTM_NEWADDR, RTM_NEWROUTE = 16, 20, 24
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
NLMSG_ERROR = 2
IFF_UP = 0x1
IFA_ADDRESS, IFA_LOCAL = 1, 2
RTA_DST, RTA_OIF, RTA_GATEWAY = 1, 4, 5
RT_TABLE_MAIN, RTPROT_BOOT, RT_SCOPE_UNIVERSE, RT_SCOPE_LINK, RTN_UNICAST = 254, 3, 0, 253, 1


class RtnlError(KernelError):
    """The kernel refused an rtnetlink request (errno is its answer)."""


def _attr(kind: int, data: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(data), kind) + data
    return raw + b"\0" * (-len(raw) % 4)


def _msg(mtype: int, flags: int, seq: int, body: bytes) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), mtype, flags | NLM_F_REQUEST | NLM_F_ACK, seq, 0) + body


def link_up(index: int, seq: int) -> bytes:
    return set_flags(index, IFF_UP, IFF_UP, seq)


def set_flags(index: int, flags: int, change: int, seq: int) -> bytes:
    """Set the `change` bits of a link's flags to their values in `flags` (IFF_UP, IFF_PROMISC...)."""
    return _msg(RTM_NEWLINK, 0, seq, struct.pack("=BxHiII", socket.AF_UNSPEC, 0, index, flags, change))


def add_address(index: int, cidr: str, seq: int) -> bytes:
    iface = ipaddress.ip_interface(cidr)
    fam = socket.AF_INET6 if iface.version == 6 else socket.AF_INET
    body = struct.pack("=BBBBI", fam, iface.network.prefixlen, 0, RT_SCOPE_UNIVERSE, index)
    body += _attr(IFA_LOCAL, iface.ip.packed) + _attr(IFA_ADDRESS, iface.ip.packed)
    return _msg(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, seq, body)


def add_route(index: int, dst: str, gw: str | None, seq: int) -> bytes:
    net = ipaddress.ip_network(dst, strict=False)
    fam = socket.AF_INET6 if net.version == 6 else socket.AF_INET
    scope = RT_SCOPE_UNIVERSE if gw else RT_SCOPE_LINK
    body = struct.pack("=BBBBBBBBI", fam, net.prefixlen, 0, 0, RT_TABLE_MAIN, RTPROT_BOOT, scope,
                       RTN_UNICAST, 0)
    if net.prefixlen:
        body += _attr(RTA_DST, net.network_address.packed)
    if gw:
        body += _attr(RTA_GATEWAY, ipaddress.ip_address(gw).packed)
    body += _attr(RTA_OIF, struct.pack("=I", index))
    return _msg(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, seq, body)


def open_socket() -> socket.socket:
    """A NETLINK_ROUTE socket in the calling thread's netns (it stays bound there)."""
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
    s.bind((0, 0))
    return s


def send_batch(s: socket.socket, msgs: list[bytes], ok_errnos: tuple[int, ...] = (errno.EEXIST,)) -> None:
    """Send the requests in one write; wait for every ACK; raise OSError on the first real error.

    Messages are numbered 1..n, in order; the kernel handles them in that order.
    """
    s.send(b"".join(msgs))
    pending = set(range(1, len(msgs) + 1))
    first_error: RtnlError | None = None
    while pending:
        data = s.recv(65536)
        off = 0
        while off + 16 <= len(data):
            length, mtype, _flags, seq, _pid = struct.unpack_from("=IHHII", data, off)
            if mtype == NLMSG_ERROR:
                code = -struct.unpack_from("=i", data, off + 16)[0]
                pending.discard(seq)
                if code and code not in ok_errnos and first_error is None:
                    first_error = RtnlError(code, f"netlink request {seq}: {os.strerror(code)}")
            off += (length + 3) & ~3
            if length == 0:
                break
    if first_error:
        raise first_error


def configure(s: socket.socket, index: int, cidrs: list[str], routes: list[tuple[str, str | None]]) -> None:
    """Link up, addresses, routes for interface `index`, in one batch."""
    msgs = [link_up(index, 1)]
    for c in cidrs:
        msgs.append(add_address(index, c, len(msgs) + 1))
    for dst, gw in routes:
        msgs.append(add_route(index, dst, gw, len(msgs) + 1))
    send_batch(s, msgs)


RTM_DELLINK = 17
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_MASTER, IFLA_LINKINFO, IFLA_NET_NS_FD = 1, 3, 4, 10, 18, 28
IFLA_INFO_KIND, IFLA_INFO_DATA, VETH_INFO_PEER = 1, 2, 1


def _ifinfo(index: int = 0, flags: int = 0, change: int = 0) -> bytes:
    return struct.pack("=BxHiII", socket.AF_UNSPEC, 0, index, flags, change)


def _name(name: str) -> bytes:
    return _attr(IFLA_IFNAME, name.encode() + b"\0")


def _mac(mac: str) -> bytes:
    return bytes.fromhex(mac.replace(":", ""))


def new_veth(host: str, peer: str, netns_fd: int, master: int, peer_mac: str, mtu: int | None,
             seq: int) -> bytes:
    """One RTM_NEWLINK: the host end up and enslaved, the peer created directly inside the netns."""
    peer_attrs = (_name(peer) + _attr(IFLA_NET_NS_FD, struct.pack("=I", netns_fd))
                  + _attr(IFLA_ADDRESS, _mac(peer_mac)))
    host_attrs = _name(host) + _attr(IFLA_MASTER, struct.pack("=I", master))
    if mtu:
        peer_attrs += _attr(IFLA_MTU, struct.pack("=I", mtu))
        host_attrs += _attr(IFLA_MTU, struct.pack("=I", mtu))
    peer_info = _attr(VETH_INFO_PEER, _ifinfo() + peer_attrs)
    info = _attr(IFLA_INFO_KIND, b"veth\0") + _attr(IFLA_INFO_DATA, peer_info)
    body = _ifinfo(0, IFF_UP, IFF_UP) + host_attrs + _attr(IFLA_LINKINFO, info)
    return _msg(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, seq, body)


RTM_SETLINK, IFLA_PROTINFO, IFLA_BRPORT_MODE, NLA_F_NESTED = 19, 12, 4, 0x8000


def set_hairpin(index: int, on: bool, seq: int) -> bytes:
    """One RTM_SETLINK for the bridge port `index`: its hairpin mode (IFLA_BRPORT_MODE), as the reference
    bridge plugin sets it (netlink's LinkSetHairpin). Not sysfs' brport/hairpin_mode: its write takes
    rtnl_lock with a trylock and restarts the syscall while another holds it, spinning on a CPU while
    concurrent ADDs make their veths."""
    mode = _attr(IFLA_BRPORT_MODE, struct.pack("=B", 1 if on else 0))
    port = struct.pack("=BxHiII", socket.AF_BRIDGE, 0, index, 0, 0)
    return _msg(RTM_SETLINK, 0, seq, port + _attr(IFLA_PROTINFO | NLA_F_NESTED, mode))


def del_link(name: str, seq: int) -> bytes:
    return _msg(RTM_DELLINK, 0, seq, _ifinfo() + _name(name))


def request(msgs: list[bytes], ok_errnos: tuple[int, ...] = ()) -> None:
    """Send a batch on a fresh socket in this thread's netns (the host's, for plugin callers)."""
    with open_socket() as s:
        send_batch(s, msgs, ok_errnos)


def random_mac() -> str:
    """A locally administered unicast MAC, set at creation so the result needs no query in the netns."""
    b = bytearray(os.urandom(6))
    b[0] = (b[0] & 0xFC) | 0x02
    return ":".join(f"{x:02x}" for x in b)


def delete(name: str) -> bool:
    """Delete a host link by name; False if it was already gone."""
    try:
        request([del_link(name, 1)])
        return True
    except OSError as e:
        if e.errno in (errno.ENODEV, errno.ENOENT):
            return False
        raise


def sysfs_link(name: str) -> dict[str, str] | None:
    """ifindex, mac, peer index (iflink) and flags of a host link, read from sysfs (no netlink)."""
    base = f"/sys/class/net/{name}/"
    try:
        out = {}
        for key in ("ifindex", "address", "iflink", "flags"):
            with open(base + key) as f:
                out[key] = f.read().strip()
        return out
    except (FileNotFoundError, NotADirectoryError):
        return None
