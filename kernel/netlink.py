"""pyroute2 helpers for what is not on a hot path (that is `kernel.rtnl`): creating and tuning
bridges, VLANs, links looked up or deleted by name, and the queries the CNI plugin's CHECK and
forceAddress make. No policy, typed errors.

The lean launcher starts Python without site-packages; importing this module adds them
(pyroute2 lives there), so only calls that need pyroute2 pay for it.
"""

from __future__ import annotations

import contextlib
import errno
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

if sys.flags.no_site and "pyroute2" not in sys.modules:
    import site

    site.main()

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from kernel import netns
from kernel.errors import KernelError

_local = threading.local()


class LinkError(KernelError):
    """A link is not what it must be (another kind under our name, gone while being made)."""

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


def get_link(ipr: IPRoute, name: str) -> Any | None:
    """One RTM_GETLINK by name (never a dump); None if there is no such link."""
    try:
        return ipr.link("get", ifname=name)[0]
    except NetlinkError as e:
        if e.code == errno.ENODEV:
            return None
        raise


def link_index(ipr: IPRoute, name: str) -> int | None:
    link = get_link(ipr, name)
    return None if link is None else int(link["index"])


def delete_link(ipr: IPRoute, name: str) -> bool:
    """Delete the link called `name`; False when there is none (already gone is fine)."""
    index = link_index(ipr, name)
    if index is None:
        return False
    try:
        ipr.link("del", index=index)
    except NetlinkError as e:
        if e.code != errno.ENODEV:  # deleted meanwhile
            raise
        return False
    return True


def ensure_bridge(ipr: IPRoute, name: str, mtu: int | None, promisc: bool, vlan_filtering: bool) -> Any:
    """The bridge's link message, creating it (up) if needed. One netlink round trip when it exists."""
    link = get_link(ipr, name)
    if link is None:
        kw: dict[str, Any] = {"ifname": name, "kind": "bridge", "state": "up"}
        if mtu:
            kw["mtu"] = mtu
        if vlan_filtering:
            kw["br_vlan_filtering"] = 1
        try:
            ipr.link("add", **kw)
        except NetlinkError as e:
            if e.code != errno.EEXIST:  # a concurrent ADD made it first
                raise
        link = get_link(ipr, name)
        if link is None:
            raise LinkError(f"bridge {name} vanished while being created")
    if link.get_nested("IFLA_LINKINFO", "IFLA_INFO_KIND") not in (None, "bridge"):
        raise LinkError(f"{name} exists and is not a bridge")
    want_flags = 1 | (0x100 if promisc else 0)  # IFF_UP | IFF_PROMISC
    if link["flags"] & want_flags != want_flags:
        ipr.link("set", index=link["index"], state="up", **({"promisc": 1} if promisc else {}))
    if vlan_filtering and not link.get_nested("IFLA_LINKINFO", "IFLA_INFO_DATA", "IFLA_BR_VLAN_FILTERING"):
        ipr.link("set", index=link["index"], kind="bridge", br_vlan_filtering=1)
    return link


def set_vlan(ipr: IPRoute, index: int, vid: int) -> None:
    """Make `vid` the port's untagged PVID (bridge vlan filtering)."""
    with contextlib.suppress(NetlinkError):
        ipr.vlan_filter("del", index=index, vlan_info={"vid": 1})
    ipr.vlan_filter("add", index=index, vlan_info={"vid": vid, "flags": 6})  # PVID | UNTAGGED
