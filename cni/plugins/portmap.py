"""nodeagent-portmap: hostPort DNAT for a chained attachment, from the `portMappings` capability.

Per attachment: a DNAT chain jumped from PREROUTING and OUTPUT for local
destinations, and a SNAT chain jumped from POSTROUTING that masquerades the
pod subnet (hairpin: a pod reaching itself or a neighbour through a host port)
and 127.0.0.0/8 (localhost access, with route_localnet on the host bridge).
Everything is tagged, so DEL and GC find it without the result. IPv4 only.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os

from cni import iptables
from cni.errors import INVALID_CONFIG, UNKNOWN_CONTAINER, CNIError
from cni.plugins.host_local import valid_attachments
from kernel.iptables import backend as iptables_backend

TYPE_CHECKING = False  # typing is not imported at run time: the exec'd path stays lean
if TYPE_CHECKING:
    from typing import Any

    from cni.skel import CmdArgs

DN_PREFIX = "NA-DN-"
SN_PREFIX = "NA-SN-"
PREFIXES = (DN_PREFIX, SN_PREFIX)


def mappings(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    raw = (cfg.get("runtimeConfig") or {}).get("portMappings") or []
    out = []
    for m in raw:
        try:
            hp, cp = int(m["hostPort"]), int(m["containerPort"])
        except (KeyError, TypeError, ValueError):
            raise CNIError(INVALID_CONFIG, "invalid port mapping", str(m)) from None
        proto = str(m.get("protocol") or "tcp").lower()
        if not (0 < hp < 65536 and 0 < cp < 65536) or proto not in ("tcp", "udp", "sctp"):
            raise CNIError(INVALID_CONFIG, "invalid port mapping", str(m))
        host_ip = str(m.get("hostIP") or "")
        if host_ip and ":" in host_ip:
            continue  # IPv6 host ports are not supported; the v4 ones still apply
        out.append({"hostPort": hp, "containerPort": cp, "protocol": proto, "hostIP": host_ip})
    return out


def _pod_v4(prev: dict[str, Any]) -> list[ipaddress.IPv4Interface]:
    out = []
    for ip in prev.get("ips", []):
        iface = ipaddress.ip_interface(ip["address"])
        if iface.version == 4:
            out.append(iface)
    return out


def _host_bridges(prev: dict[str, Any]) -> list[str]:
    return [i["name"] for i in prev.get("interfaces", [])
            if not i.get("sandbox") and os.path.isdir(f"/sys/class/net/{i.get('name')}/bridge")]


def rules(net: str, cid: str, ifname: str, pod: ipaddress.IPv4Interface, maps: list[dict[str, Any]],
          snat: bool) -> list[str]:
    t = iptables.tag("portmap", net, cid, ifname)
    dn = iptables.chain_name(DN_PREFIX, net, cid, ifname)
    sn = iptables.chain_name(SN_PREFIX, net, cid, ifname)
    c = f'-m comment --comment "{t}"'
    lines = [f":{dn} - [0:0]", f":{sn} - [0:0]"]
    for m in maps:
        dst = f"-d {m['hostIP']}/32 " if m["hostIP"] and m["hostIP"] != "0.0.0.0" else ""
        lines.append(f"-A {dn} {dst}-p {m['protocol']} -m {m['protocol']} --dport {m['hostPort']} {c} "
                     f"-j DNAT --to-destination {pod.ip}:{m['containerPort']}")
        if snat:
            for src in (str(pod.network), "127.0.0.0/8"):
                lines.append(f"-A {sn} -s {src} -p {m['protocol']} -m {m['protocol']} "
                             f"--dport {m['containerPort']} {c} -j MASQUERADE")
    lines += [
        f"-A PREROUTING -m addrtype --dst-type LOCAL {c} -j {dn}",
        f"-A OUTPUT -m addrtype --dst-type LOCAL {c} -j {dn}",
        f"-I POSTROUTING 1 -d {pod.ip}/32 {c} -j {sn}",  # before the bridge's masq ACCEPT of pod traffic
    ]
    return lines


class Portmap:
    def add(self, a: CmdArgs) -> dict[str, Any]:
        prev = a.config.get("prevResult")
        if not isinstance(prev, dict):
            raise CNIError(INVALID_CONFIG, "portmap must be chained: prevResult missing")
        maps = mappings(a.config)
        if not maps:
            return prev
        pods = _pod_v4(prev)
        if not pods:
            return prev
        be = iptables_backend(a.env)
        self._remove(be, a, exact=True)  # a retried ADD replaces, never duplicates
        snat = a.config.get("snat", True) is not False
        if snat:
            for br in _host_bridges(prev):
                path = f"/proc/sys/net/ipv4/conf/{br}/route_localnet"
                with open(path) as f:
                    if f.read().strip() != "1":
                        with open(path, "w") as w:
                            w.write("1")
        iptables.restore(be, "nat", rules(a.name, a.container_id, a.ifname, pods[0], maps, snat))
        return prev

    def _remove(self, be: str, a: CmdArgs, exact: bool) -> None:
        key = (a.name, a.container_id, a.ifname)
        iptables.remove_tagged(be, "nat", "portmap", lambda n, c, i: (n, c, i) == key, PREFIXES)

    def delete(self, a: CmdArgs) -> None:
        self._remove(iptables_backend(a.env), a, exact=True)

    def check(self, a: CmdArgs) -> None:
        if not isinstance(a.config.get("prevResult"), dict):
            raise CNIError(INVALID_CONFIG, "CHECK needs prevResult")
        if not mappings(a.config):
            return
        dn = iptables.chain_name(DN_PREFIX, a.name, a.container_id, a.ifname)
        if f":{dn} " not in iptables.save(iptables_backend(a.env), "nat"):
            raise CNIError(UNKNOWN_CONTAINER, f"portmap chain {dn} missing")

    def gc(self, a: CmdArgs) -> None:
        valid = valid_attachments(a.config)
        with contextlib.suppress(CNIError):
            iptables.remove_tagged(iptables_backend(a.env), "nat", "portmap",
                                   lambda n, c, i: n == a.name and (c, i) not in valid, PREFIXES)

    def status(self, a: CmdArgs) -> None:
        return None


def main() -> int:
    from cni import skel

    return skel.main(Portmap())
