"""Apply a `plan.Plan` to the kernel through pyroute2 (blocking: callers run it in a thread).

Our routes carry their own protocol number (RTPROT_NODENET), so what we own is read back from the kernel
instead of remembered: a restarted agent removes routes of nodes that left while it was down. FDB and
neighbour entries live on our own vxlan device only, so every permanent entry there is ours.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
from typing import Any

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from kernel.netlink import delete_link, get_link
from nodeagent.nodenet import plan as P

log = logging.getLogger("nodeagent.nodenet")

RTPROT_NODENET = 160  # our routes' protocol: nothing else on the node uses it
RTNH_F_ONLINK = 4
NUD_PERMANENT = 0x80
NTF_SELF = 0x02


def source_address_towards(host: str) -> str:
    """The address this node's kernel uses to reach `host` (the apiserver): its underlay address."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))  # UDP connect sends nothing; it only picks the route and source
        return s.getsockname()[0]


def link_of_address(ipr: IPRoute, address: str) -> tuple[int, int]:
    """(ifindex, mtu) of the link holding `address`."""
    for a in ipr.get_addr(family=socket.AF_INET):
        if a.get_attr("IFA_LOCAL") == address or a.get_attr("IFA_ADDRESS") == address:
            link = ipr.link("get", index=a["index"])[0]
            return int(a["index"]), int(link.get_attr("IFLA_MTU"))
    raise RuntimeError(f"no link holds {address}")


class Dataplane:
    """One node's tunnel device and entries for one mode."""

    def __init__(self, mode: str, public_ip: str, pod_cidr: str) -> None:
        self.mode = mode
        self.public_ip = public_ip
        self.pod_cidr = str(ipaddress.ip_network(pod_cidr))
        self.device = P.device_for(mode)
        self.vtep_mac: str | None = None

    # -- device -------------------------------------------------------------------------------------
    def setup(self) -> None:
        """Create/adjust the tunnel device (vxlan: VNI 1, port 8472, MTU underlay-50; ipip: tunl0)."""
        if self.device is None:
            return
        with IPRoute() as ipr:
            under_idx, under_mtu = link_of_address(ipr, self.public_ip)
            mtu = P.mtu_for(self.mode, under_mtu)
            link = get_link(ipr, self.device)
            if link is not None and self.mode == "vxlan" and not self._vxlan_matches(link, under_idx):
                log.info("%s: settings changed, recreating it", self.device)
                delete_link(ipr, self.device)
                link = None
            if link is None:
                if self.mode == "vxlan":
                    ipr.link("add", ifname=self.device, kind="vxlan", vxlan_id=P.VXLAN_VNI,
                             vxlan_port=P.VXLAN_PORT, vxlan_local=self.public_ip, vxlan_link=under_idx,
                             vxlan_learning=0, mtu=mtu)
                else:
                    try:
                        ipr.link("add", ifname=self.device, kind="ipip")
                    except NetlinkError as e:
                        if e.code != errno.EEXIST:
                            raise
                link = get_link(ipr, self.device)
                assert link is not None
            idx = int(link["index"])
            ipr.link("set", index=idx, mtu=mtu, state="up")
            addr = P.tunnel_address(self.pod_cidr)
            have = {a.get_attr("IFA_LOCAL") for a in ipr.get_addr(index=idx, family=socket.AF_INET)}
            for other in have - {addr}:
                ipr.addr("del", index=idx, address=other, prefixlen=32)
            if addr not in have:
                ipr.addr("add", index=idx, address=addr, prefixlen=32)
            self.vtep_mac = (ipr.link("get", index=idx)[0].get_attr("IFLA_ADDRESS")
                             if self.mode == "vxlan" else None)

    def _vxlan_matches(self, link: Any, under_idx: int) -> bool:
        data = link.get_nested("IFLA_LINKINFO", "IFLA_INFO_DATA")
        if link.get_nested("IFLA_LINKINFO", "IFLA_INFO_KIND") != "vxlan" or data is None:
            return False
        return (data.get_attr("IFLA_VXLAN_ID") == P.VXLAN_VNI
                and data.get_attr("IFLA_VXLAN_PORT") == P.VXLAN_PORT
                and data.get_attr("IFLA_VXLAN_LOCAL") == self.public_ip
                and data.get_attr("IFLA_VXLAN_LINK") == under_idx)

    # -- entries ------------------------------------------------------------------------------------
    def current(self) -> P.Plan:
        """Our entries as the kernel holds them."""
        with IPRoute() as ipr:
            dev_idx = self._device_index(ipr)
            routes = set()
            for r in ipr.get_routes(family=socket.AF_INET, table=254):
                if r["proto"] != RTPROT_NODENET:
                    continue
                dst = f"{r.get_attr('RTA_DST')}/{r['dst_len']}"
                gw = r.get_attr("RTA_GATEWAY")
                oif = r.get_attr("RTA_OIF")
                dev = self.device if (dev_idx is not None and oif == dev_idx) else None
                onlink = bool(r["flags"] & RTNH_F_ONLINK)
                if dev is None and self.device is not None:
                    dev = f"if{oif}"  # a route of ours on another device: not wanted, so it goes
                routes.add(P.Route(dst, gw, dev, onlink))
            fdb, neigh = set(), set()
            if dev_idx is not None and self.mode == "vxlan":
                for e in ipr.fdb("dump", ifindex=dev_idx):
                    if e["ifindex"] == dev_idx and e["state"] & NUD_PERMANENT and e.get_attr("NDA_DST"):
                        fdb.add(P.Fdb(e.get_attr("NDA_LLADDR").lower(), e.get_attr("NDA_DST")))
                for e in ipr.get_neighbours(family=socket.AF_INET, ifindex=dev_idx):
                    if e["state"] & NUD_PERMANENT:
                        neigh.add(P.Neigh(e.get_attr("NDA_DST"), e.get_attr("NDA_LLADDR").lower()))
        return P.Plan(self.mode, frozenset(routes), frozenset(fdb), frozenset(neigh))

    def _device_index(self, ipr: IPRoute) -> int | None:
        if self.device is None:
            return None
        link = get_link(ipr, self.device)
        return None if link is None else int(link["index"])

    def apply(self, changes: P.Changes) -> None:
        """Deletions, then FDB and neighbour entries, then the routes that need them."""
        with IPRoute() as ipr:
            dev_idx = self._device_index(ipr)
            for r in changes.del_routes:
                self._ignore_missing(lambda r=r: ipr.route("del", table=254, proto=RTPROT_NODENET,
                                                           dst=r.dst, gateway=r.gateway))
            for f in changes.del_fdb:
                self._ignore_missing(lambda f=f: ipr.fdb("del", ifindex=dev_idx, lladdr=f.mac, dst=f.dst))
            for n in changes.del_neigh:
                self._ignore_missing(lambda n=n: ipr.neigh("del", ifindex=dev_idx, dst=n.ip, lladdr=n.mac))
            for f in changes.add_fdb:
                ipr.fdb("append", ifindex=dev_idx, lladdr=f.mac, dst=f.dst, state=NUD_PERMANENT,
                        flags=NTF_SELF)
            for n in changes.add_neigh:
                ipr.neigh("replace", ifindex=dev_idx, dst=n.ip, lladdr=n.mac, state=NUD_PERMANENT)
            for r in changes.add_routes:
                kw: dict[str, Any] = {"table": 254, "proto": RTPROT_NODENET, "dst": r.dst,
                                      "gateway": r.gateway}
                if r.device is not None:
                    kw["oif"] = dev_idx
                if r.onlink:
                    kw["flags"] = RTNH_F_ONLINK
                ipr.route("replace", **kw)

    @staticmethod
    def _ignore_missing(fn: Any) -> None:
        try:
            fn()
        except NetlinkError as e:
            if e.code not in (errno.ENOENT, errno.ESRCH, errno.ENODEV):
                raise

    def teardown(self) -> None:
        """Remove every route of ours and our tunnel device (tunl0 stays: the kernel owns it; it goes
        down)."""
        have = self.current()
        self.apply(P.Changes(del_routes=sorted(have.routes, key=repr)))
        if self.device is None:
            return
        with IPRoute() as ipr:
            link = get_link(ipr, self.device)
            if link is None:
                return
            if self.mode == "vxlan":
                delete_link(ipr, self.device)
            else:
                ipr.flush_addr(index=link["index"])
                ipr.link("set", index=link["index"], state="down")
