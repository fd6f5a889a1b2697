"""Small synchronous pyroute2 helpers for the bridge plugin; no policy, typed errors.

The veth pair is created in one RTM_NEWLINK from the host: the host end enslaved
to the bridge, the peer born inside the container netns under its final name,
so nothing is moved or renamed. Only the container-side address/route set-up
needs a socket in the netns, opened through `cni.netns.run_in`.
"""

from __future__ import annotations

import contextlib
import errno
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from cni import netns

_local = threading.local()
T = TypeVar("T")


def host() -> IPRoute:
    """This thread's netlink socket in the host netns (pyroute2 sockets are not shared across threads)."""
    ipr = getattr(_local, "ipr", None)
    if ipr is None:
        ipr = _local.ipr = IPRoute()
    return ipr


def in_netns(netns_fd: int, fn: Callable[[IPRoute], T]) -> T:
    """Run `fn(ipr)` with a netlink socket opened, used and closed inside the netns.

    pyroute2 opens its socket lazily per thread, so the socket must never leave the
    netns thread: a call from another thread would silently open one in the host netns.
    """

    def body() -> T:
        with IPRoute() as ipr:
            return fn(ipr)

    return netns.run_in(netns_fd, body)


def link_index(ipr: IPRoute, name: str) -> int | None:
    try:
        found = ipr.link_lookup(ifname=name)
    except NetlinkError as e:
        if e.code == errno.ENODEV:
            return None
        raise
    return found[0] if found else None


def link_info(ipr: IPRoute, index: int) -> Any:
    return ipr.get_links(index)[0]


def mac_of(link: Any) -> str:
    return str(link.get("IFLA_ADDRESS") or link.get_attr("IFLA_ADDRESS") or "")


def ensure_bridge(ipr: IPRoute, name: str, mtu: int | None, promisc: bool, vlan_filtering: bool) -> int:
    idx = link_index(ipr, name)
    if idx is None:
        kw: dict[str, Any] = {"ifname": name, "kind": "bridge"}
        if mtu:
            kw["mtu"] = mtu
        if vlan_filtering:
            kw["br_vlan_filtering"] = 1
        try:
            ipr.link("add", **kw)
        except NetlinkError as e:
            if e.code != errno.EEXIST:  # a concurrent ADD made it first
                raise
        idx = link_index(ipr, name)
        if idx is None:
            raise RuntimeError(f"bridge {name} vanished while being created")
    link = link_info(ipr, idx)
    if link.get_attr("IFLA_LINKINFO") and link.get_nested("IFLA_LINKINFO", "IFLA_INFO_KIND") != "bridge":
        raise RuntimeError(f"{name} exists and is not a bridge")
    want_flags = 1 | (0x100 if promisc else 0)  # IFF_UP | IFF_PROMISC
    if link["flags"] & want_flags != want_flags:
        ipr.link("set", index=idx, state="up", **({"promisc": 1} if promisc else {}))
    if vlan_filtering and not link.get_nested("IFLA_LINKINFO", "IFLA_INFO_DATA", "IFLA_BR_VLAN_FILTERING"):
        ipr.link("set", index=idx, kind="bridge", br_vlan_filtering=1)
    return idx


def ensure_addr(ipr: IPRoute, index: int, address: str, prefixlen: int) -> None:
    family = 10 if ":" in address else 2
    for a in ipr.get_addr(index=index, family=family):
        if a.get_attr("IFA_ADDRESS") == address and a["prefixlen"] == prefixlen:
            return
    try:
        ipr.addr("add", index=index, address=address, prefixlen=prefixlen)
    except NetlinkError as e:
        if e.code != errno.EEXIST:
            raise


def create_veth(ipr: IPRoute, host_name: str, peer_name: str, netns_fd: int, master: int,
                mtu: int | None) -> int:
    """Create the pair (host end up, enslaved; peer inside the netns); return the host end's index."""
    kw: dict[str, Any] = {"ifname": host_name, "kind": "veth", "master": master,
                          "peer": {"ifname": peer_name, "net_ns_fd": netns_fd}}
    if mtu:
        kw["mtu"] = mtu
        kw["peer"]["mtu"] = mtu
    ipr.link("add", **kw)
    idx = link_index(ipr, host_name)
    if idx is None:
        raise RuntimeError(f"veth {host_name} vanished after creation")
    ipr.link("set", index=idx, state="up")
    return idx


def delete_link(ipr: IPRoute, name: str) -> bool:
    """Delete a link by name; False if it was already gone."""
    try:
        ipr.link("del", ifname=name)
        return True
    except NetlinkError as e:
        if e.code in (errno.ENODEV, errno.ENOENT):
            return False
        raise


def links_with_prefix(ipr: IPRoute, prefix: str) -> list[str]:
    return [n for n in (link.get_attr("IFLA_IFNAME") for link in ipr.get_links()) if n and n.startswith(prefix)]


def set_vlan(ipr: IPRoute, index: int, vid: int) -> None:
    """Make `vid` the port's untagged PVID (bridge vlan filtering)."""
    with contextlib.suppress(NetlinkError):
        ipr.vlan_filter("del", index=index, vlan_info={"vid": 1})
    ipr.vlan_filter("add", index=index, vlan_info={"vid": vid, "flags": 6})  # PVID | UNTAGGED


def configure_container(c: IPRoute, ifname: str, ips: list[dict[str, Any]],
                        routes: list[dict[str, Any]]) -> tuple[int, str]:
    """Inside the netns: addresses on `ifname`, link up, routes; return (index, mac)."""
    idx = link_index(c, ifname)
    if idx is None:
        raise RuntimeError(f"{ifname} missing in the container netns")
    for ip in ips:
        addr, _, plen = ip["address"].partition("/")
        try:
            c.addr("add", index=idx, address=addr, prefixlen=int(plen))
        except NetlinkError as e:
            if e.code != errno.EEXIST:
                raise
    c.link("set", index=idx, state="up")
    for r in routes:
        kw: dict[str, Any] = {"dst": r["dst"], "oif": idx}
        if r.get("gw"):
            kw["gateway"] = r["gw"]
        try:
            c.route("add", **kw)
        except NetlinkError as e:
            if e.code != errno.EEXIST:
                raise
    return idx, mac_of(link_info(c, idx))
