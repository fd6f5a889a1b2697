"""nodeagent-bridge: veth pairs on a Linux bridge, addresses from any IPAM plugin.

ADD is a flat pipeline (conf → bridge → veth → IPAM → gateway → container side →
masquerade → result); every acquired resource pushes its undo on an ExitStack
that is dropped only on success. DEL and GC need no saved state: the host veth
name, the masquerade chain and the rule tags all derive from (network,
containerID, ifname), and "already gone" is success.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os

from cni import masq
from cni.errors import INTERNAL, INVALID_CONFIG, NOT_AVAILABLE, UNKNOWN_CONTAINER, UNSUPPORTED_FIELD, CNIError
from cni.plugins import delegate
from cni.sha import sha256
from kernel import rtnl
from kernel.iptables import backend as iptables_backend

TYPE_CHECKING = False  # typing is not imported at run time: the exec'd path stays lean
if TYPE_CHECKING:
    from typing import Any

    from cni.skel import CmdArgs


class NetConf:
    """The bridge options we act on (a plain class: dataclasses costs ~10 ms of imports per exec)."""

    __slots__ = ("name", "bridge", "is_gateway", "is_default_gateway", "force_address", "ip_masq", "hairpin",
                 "promisc", "mtu", "vlan", "ipam_type")
    name: str
    bridge: str
    is_gateway: bool
    is_default_gateway: bool
    force_address: bool
    ip_masq: bool
    hairpin: bool
    promisc: bool
    mtu: int | None
    vlan: int | None
    ipam_type: str

    def __init__(self, **kw: Any) -> None:
        for k in self.__slots__:
            setattr(self, k, kw[k])


def parse_conf(cfg: dict[str, Any]) -> NetConf:
    ipam = cfg.get("ipam")
    if not isinstance(ipam, dict) or not ipam.get("type"):
        raise CNIError(INVALID_CONFIG, "bridge needs an ipam section with a type")
    br = str(cfg.get("bridge") or "cni0")
    if len(br) > 15 or "/" in br or " " in br:
        raise CNIError(INVALID_CONFIG, "invalid bridge name", br)
    mtu = cfg.get("mtu")
    if mtu is not None and (not isinstance(mtu, int) or not 68 <= mtu <= 65535):
        raise CNIError(INVALID_CONFIG, "invalid mtu", str(mtu))
    vlan = cfg.get("vlan")
    if vlan is not None and (not isinstance(vlan, int) or not 0 <= vlan <= 4094):
        raise CNIError(INVALID_CONFIG, "invalid vlan id", str(vlan))
    for unsupported in ("vlanTrunk", "macspoofchk", "enabledad"):
        if cfg.get(unsupported):
            raise CNIError(UNSUPPORTED_FIELD, f"{unsupported} is not supported by nodeagent-bridge")
    default_gw = bool(cfg.get("isDefaultGateway"))
    return NetConf(
        name=str(cfg["name"]),
        bridge=br,
        is_gateway=bool(cfg.get("isGateway")) or default_gw,
        is_default_gateway=default_gw,
        force_address=bool(cfg.get("forceAddress")),
        ip_masq=bool(cfg.get("ipMasq")),
        hairpin=bool(cfg.get("hairpinMode")),
        promisc=bool(cfg.get("promiscMode")),
        mtu=mtu,
        vlan=vlan or None,
        ipam_type=str(ipam["type"]),
    )


def host_veth_name(network: str, cid: str, ifname: str) -> str:
    """'na' + 4 hex of the network + 9 hex of the attachment: 15 chars, stable, greppable per network."""
    return veth_prefix(network) + sha256(f"{network}/{cid}/{ifname}".encode()).hexdigest()[:9]


def veth_prefix(network: str) -> str:
    return "na" + sha256(network.encode()).hexdigest()[:4]


def _sysctl(path: str, value: str) -> None:
    """Write `value` unless the file holds it already; a file that is not there is left alone."""
    try:
        with open(path) as f:
            if f.read().strip() == value:
                return
        with open(path, "w") as f:
            f.write(value)
    except FileNotFoundError:
        return


def open_netns(path: str) -> int:
    """An fd for the netns at `path` (CNI_NETNS); CNIError 3 if it is not there."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise CNIError(UNKNOWN_CONTAINER, "failed to open netns", f"{path}: {e.strerror}") from None


class Bridge:
    def __init__(self, masq_cache: masq.Cache | None = None) -> None:
        # a resident daemon passes one long-lived cache; an exec'd plugin starts empty each time
        self.masq_cache = masq_cache or masq.Cache()

    def add(self, a: CmdArgs) -> dict[str, Any]:
        from kernel import netns

        conf = parse_conf(a.config)
        fd = open_netns(a.netns)
        undo = contextlib.ExitStack()
        with contextlib.closing(_Fd(fd)), undo:
            br = ensure_bridge(conf)
            br_idx = int(br["ifindex"])
            host_name = host_veth_name(conf.name, a.container_id, a.ifname)
            cmac = rtnl.random_mac()
            new = rtnl.new_veth(host_name, a.ifname, fd, br_idx, cmac, conf.mtu, 1)
            try:
                rtnl.request([new])
            except OSError as e:
                if e.errno != errno.EEXIST:
                    raise
                # a retried ADD (our host end from the earlier try), or a clash inside the netns
                if not rtnl.delete(host_name):
                    raise CNIError(INVALID_CONFIG,
                                   f"container already has an interface named {a.ifname}") from None
                rtnl.request([new])
            undo.callback(rtnl.delete, host_name)
            host = rtnl.sysfs_link(host_name)
            if host is None:
                raise CNIError(INTERNAL, f"veth {host_name} vanished after creation")
            peer_index = int(host["iflink"])
            if conf.hairpin:  # a new port (hairpin off): set, not read first
                rtnl.request([rtnl.set_hairpin(int(host["ifindex"]), True, 1)])
            if conf.vlan:
                from kernel import netlink

                netlink.set_vlan(netlink.host(), int(host["ifindex"]), conf.vlan)

            ipam = delegate.call("ADD", conf.ipam_type, a.stdin, a.env, a.path) or {}
            undo.callback(_quiet, delegate.call, "DEL", conf.ipam_type, a.stdin, a.env, a.path)
            ips = [dict(i) for i in ipam.get("ips", [])]
            if not ips:
                raise CNIError(INVALID_CONFIG, "IPAM plugin returned no IP addresses")
            routes = [dict(r) for r in ipam.get("routes", [])]

            if conf.is_gateway:
                for ip in ips:
                    gw = ip.get("gateway")
                    if gw:
                        plen = ipaddress.ip_interface(ip["address"]).network.prefixlen
                        if conf.force_address:
                            from kernel import netlink

                            _drop_other_addrs(netlink.host(), br_idx, gw, ip["address"])
                        rtnl.request([rtnl.add_address(br_idx, f"{gw}/{plen}", 1)], ok_errnos=(errno.EEXIST,))
                if any(":" not in i["address"] for i in ips):
                    _sysctl("/proc/sys/net/ipv4/ip_forward", "1")
                if any(":" in i["address"] for i in ips):
                    _sysctl("/proc/sys/net/ipv6/conf/all/forwarding", "1")
            if conf.is_default_gateway:
                for ip in ips:
                    if ip.get("gateway"):
                        dst = "::/0" if ":" in ip["address"] else "0.0.0.0/0"
                        routes = [r for r in routes if r["dst"] != dst] + [{"dst": dst, "gw": ip["gateway"]}]
            croutes = [dict(r, gw=r.get("gw") or _gw_for(r["dst"], ips)) for r in routes]

            csock = netns.run_in(fd, rtnl.open_socket)  # opened inside the netns, stays bound to it
            with csock:
                rtnl.configure(csock, peer_index, [i["address"] for i in ips],
                               [(r["dst"], r.get("gw")) for r in croutes])

            if conf.ip_masq:
                with masq.bridge_lock(conf.bridge):
                    masq.ensure(iptables_backend(a.env), conf.name, [i["address"] for i in ips],
                                self.masq_cache)
            undo.pop_all()
        for ip in ips:
            ip["interface"] = 2
        result: dict[str, Any] = {
            "cniVersion": a.version,
            "interfaces": [
                {"name": conf.bridge, "mac": br["address"]},
                {"name": host_name, "mac": host["address"]},
                {"name": a.ifname, "mac": cmac, "sandbox": a.netns},
            ],
            "ips": ips,
            "routes": routes,
        }
        dns = ipam.get("dns") or a.config.get("dns")
        if dns:
            result["dns"] = dns
        return result

    def delete(self, a: CmdArgs) -> None:
        conf = parse_conf(a.config)
        delegate.call("DEL", conf.ipam_type, a.stdin, a.env, a.path)
        rtnl.delete(host_veth_name(conf.name, a.container_id, a.ifname))
        if conf.ip_masq:
            self._masq_if_unused(conf, a)

    def _masq_if_unused(self, conf: NetConf, a: CmdArgs) -> None:
        """The network's last veth is gone from this host: its masquerade chain goes too."""
        prefix = veth_prefix(conf.name)
        with masq.bridge_lock(conf.bridge):
            if not any(n.startswith(prefix) for n in os.listdir("/sys/class/net")):
                masq.remove(iptables_backend(a.env), conf.name, self.masq_cache)

    def check(self, a: CmdArgs) -> None:
        from kernel import netlink

        conf = parse_conf(a.config)
        prev = a.config.get("prevResult")
        if not isinstance(prev, dict):
            raise CNIError(INVALID_CONFIG, "CHECK needs prevResult")
        delegate.call("CHECK", conf.ipam_type, a.stdin, a.env, a.path)
        ipr = netlink.host()
        br_idx = netlink.link_index(ipr, conf.bridge)
        if br_idx is None:
            raise CNIError(UNKNOWN_CONTAINER, f"bridge {conf.bridge} not found")
        host_name = host_veth_name(conf.name, a.container_id, a.ifname)
        h = netlink.get_link(ipr, host_name)
        if h is None or h.get_attr("IFLA_MASTER") != br_idx:
            raise CNIError(UNKNOWN_CONTAINER, f"host veth {host_name} missing or not on {conf.bridge}")
        fd = open_netns(a.netns)
        try:
            have = netlink.in_netns(fd, lambda c: _addresses(c, a.ifname))
        finally:
            os.close(fd)
        if have is None:
            raise CNIError(UNKNOWN_CONTAINER, f"interface {a.ifname} not found in {a.netns}")
        for ip in prev.get("ips", []):
            addr = str(ipaddress.ip_interface(ip["address"]))
            if addr not in have:
                raise CNIError(UNKNOWN_CONTAINER, f"address {addr} not on {a.ifname}")
        if conf.ip_masq:
            addresses = [i["address"] for i in prev.get("ips", [])]
            gone = masq.missing(iptables_backend(a.env), conf.name, addresses)
            if gone:
                raise CNIError(INTERNAL, "masquerade rules missing", gone[0])

    def gc(self, a: CmdArgs) -> None:
        from cni.plugins.host_local import valid_attachments

        conf = parse_conf(a.config)
        delegate.call("GC", conf.ipam_type, a.stdin, a.env, a.path)
        valid = valid_attachments(a.config)
        keep = {host_veth_name(conf.name, cid, ifn) for cid, ifn in valid}
        prefix = veth_prefix(conf.name)
        for name in os.listdir("/sys/class/net"):
            if name.startswith(prefix) and name not in keep:
                rtnl.delete(name)
        self._masq_if_unused(conf, a)

    def status(self, a: CmdArgs) -> None:
        conf = parse_conf(a.config)
        if conf.ip_masq:
            be = iptables_backend(a.env)
            path = a.env.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin").split(os.pathsep) + ["/usr/sbin"]
            if not any(os.access(os.path.join(d, f"iptables-{be}-restore"), os.X_OK) for d in path):
                raise CNIError(NOT_AVAILABLE, f"ipMasq needs iptables-{be}-restore, which is not installed")
        delegate.call("STATUS", conf.ipam_type, a.stdin, a.env, a.path)


def _addresses(c: Any, ifname: str) -> set[str] | None:
    from kernel import netlink

    idx = netlink.link_index(c, ifname)
    if idx is None:
        return None
    return {f"{x.get_attr('IFA_ADDRESS')}/{x['prefixlen']}" for x in c.get_addr(index=idx)}


def _gw_for(dst: str, ips: list[dict[str, Any]]) -> str | None:
    v6 = ":" in dst
    return next((i.get("gateway") for i in ips if (":" in i["address"]) == v6 and i.get("gateway")), None)


def _drop_other_addrs(ipr: Any, br_idx: int, gw: str, cidr: str) -> None:
    """forceAddress: replace a different address of the same family and subnet on the bridge."""
    net = ipaddress.ip_interface(cidr).network
    for x in ipr.get_addr(index=br_idx):
        addr = x.get_attr("IFA_ADDRESS")
        if addr and addr != gw and ipaddress.ip_address(addr) in net:
            ipr.addr("del", index=br_idx, address=addr, prefixlen=x["prefixlen"])


def _quiet(fn: Any, *args: Any) -> None:
    with contextlib.suppress(Exception):
        fn(*args)


def ensure_bridge(conf: NetConf) -> dict[str, str]:
    """The bridge as sysfs shows it; pyroute2 is imported only to create or fix it up."""
    link = rtnl.sysfs_link(conf.bridge)
    want = 0x1 | (0x100 if conf.promisc else 0)  # IFF_UP | IFF_PROMISC
    if link is not None and not os.path.isdir(f"/sys/class/net/{conf.bridge}/bridge"):
        raise CNIError(INVALID_CONFIG, f"{conf.bridge} exists and is not a bridge")
    if link is None:
        from kernel import netlink

        netlink.ensure_bridge(netlink.host(), conf.bridge, conf.mtu, False, False)
        link = rtnl.sysfs_link(conf.bridge)
        if link is None:
            raise CNIError(INTERNAL, f"bridge {conf.bridge} vanished while being set up")
    if conf.vlan is not None:
        flag = f"/sys/class/net/{conf.bridge}/bridge/vlan_filtering"
        if not os.path.exists(flag):
            raise CNIError(UNSUPPORTED_FIELD, "vlan needs bridge VLAN filtering, which this kernel lacks",
                           "CONFIG_BRIDGE_VLAN_FILTERING")
        if _read(flag) != "1":
            from kernel import netlink

            netlink.host().link("set", index=int(link["ifindex"]), kind="bridge", br_vlan_filtering=1)
    if int(link["flags"], 16) & want != want:
        rtnl.request([rtnl.set_flags(int(link["ifindex"]), want, want, 1)])
    return link


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


class _Fd:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def close(self) -> None:
        os.close(self.fd)


def main() -> int:
    from cni import skel

    return skel.main(Bridge())
