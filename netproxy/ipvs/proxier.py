"""The ipvs backend: kube-ipvs0 + IPVS virtual servers (pyroute2 generic netlink) + ipsets + fixed rules.

A full sync reads what the kernel has (IPVS services and destinations, the
addresses on kube-ipvs0, our ipsets) and applies the diff to the plan, which
also repairs drift; a partial sync diffs against what it last applied. Needs a
kernel with IPVS and dummy links (the Vagrant guests; not this build machine).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess

from netproxy.ipvs.plan import (
    DUMMY,
    FILTER_CHAINS,
    IPSETS,
    NAT_CHAINS,
    SCHEDULERS,
    Desired,
    VirtualServer,
    diff,
    iptables_rules,
    plan,
)
from netproxy.proxier import NodeConfig, SyncResult
from netproxy.tracker import Changes, ProxyState

PROTO = {"TCP": socket.IPPROTO_TCP, "UDP": socket.IPPROTO_UDP, "SCTP": 132}
PROTO_NAME = {v: k for k, v in PROTO.items()}
IP_VS_SVC_F_PERSISTENT = 0x1
FWD_MASQ = 0
log = logging.getLogger("netproxy.ipvs")


# What ipvs mode needs from the node's kernel, as kube-proxy's ipvs proxier sets it (per netns):
#  - vs/conntrack=1: IPVS keeps netfilter conntrack on the packets it forwards. Without it they are
#    untracked, so nat POSTROUTING never sees them: no MASQUERADE for off-cluster sources nor for the
#    KUBE-LOOP-BACK hairpin (a pod reaching itself gets its own address back and drops it), and no
#    conntrack entry naming the endpoint for the UDP cleanup to delete.
#  - vs/expire_nodest_conn=1: the IPVS connections of a removed real server expire (5.9+: right when it
#    is deleted, with their conntrack entries; before: at their next packet, which is rescheduled once
#    the proxy's cleanup deleted its conntrack entry) instead of every packet being dropped until the
#    IPVS connection times out (UDP: 5 min).
#  - vs/expire_quiescent_template=1: affinity (persistence) templates of a removed server expire too.
#  - vs/conn_reuse_mode=0 only on kernels 4.1–5.8 (the 1 s stall on port reuse; fixed in 5.9).
SYSCTLS = {"net/ipv4/vs/conntrack": "1", "net/ipv4/vs/expire_nodest_conn": "1",
           "net/ipv4/vs/expire_quiescent_template": "1", "net/ipv4/ip_forward": "1"}
CONN_REUSE_FIXED = (5, 9)
# the hooks into our nat chains, with kube-proxy's comments: nodenet finds the POSTROUTING jump by its
# comment to keep its cluster masquerade exemption after it (nodeagent.nodenet.masq), or hairpin breaks
JUMPS = (("PREROUTING", "KUBE-SERVICES", "kubernetes service portals"),
         ("OUTPUT", "KUBE-SERVICES", "kubernetes service portals"),
         ("POSTROUTING", "KUBE-POSTROUTING", "kubernetes postrouting rules"))
# the filter hooks of loadBalancerSourceRanges (new connections only, as kube-proxy's)
FILTER_JUMPS = tuple((chain, "KUBE-PROXY-FIREWALL", "kube-proxy firewall rules")
                     for chain in ("INPUT", "FORWARD", "OUTPUT"))
NEW = ["-m", "conntrack", "--ctstate", "NEW"]
# kube-proxy's --ipvs-strict-arp: every ClusterIP/ExternalIP sits on kube-ipvs0, and by default Linux
# answers ARP for any local address on any interface, so the node would claim every Service IP on its
# LAN (the reason MetalLB / kube-vip in ARP mode need this): answer only for addresses of the
# interface asked (arp_ignore=1) and source ARP requests from the outgoing interface's best address
# (arp_announce=2). Node-wide, like kube-proxy's: conf/all wins over every interface's own value.
STRICT_ARP_SYSCTLS = {"net/ipv4/conf/all/arp_ignore": "1", "net/ipv4/conf/all/arp_announce": "2"}


def _kernel_version(release: str) -> tuple[int, int]:
    parts = release.split("-", 1)[0].split(".")
    return int(parts[0]), int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def wanted_sysctls(release: str, strict_arp: bool = False) -> dict[str, str]:
    """The sysctls ipvs mode sets on a kernel of this release (`uname -r`)."""
    wanted = dict(SYSCTLS)
    if (4, 1) <= _kernel_version(release) < CONN_REUSE_FIXED:
        wanted["net/ipv4/vs/conn_reuse_mode"] = "0"
    if strict_arp:
        wanted.update(STRICT_ARP_SYSCTLS)
    return wanted


def ensure_sysctls(strict_arp: bool = False) -> dict[str, tuple[str, str]]:
    """Set the IPVS sysctls of the calling thread's netns (/proc/sys/net follows the thread's netns);
    returns what was changed: name -> (old, new). Like kube-proxy, nothing is set back on cleanup: other
    software may rely on the values by then."""
    if not os.path.isdir("/proc/sys/net/ipv4/vs"):  # ip_vs not loaded yet (its netlink family won't autoload)
        subprocess.run(["modprobe", "-q", "ip_vs"], capture_output=True, check=False, timeout=10)
        if not os.path.isdir("/proc/sys/net/ipv4/vs"):
            raise RuntimeError("ipvs mode: the kernel has no IPVS (ip_vs module missing or not loadable)")
    changed = {}
    for name, value in wanted_sysctls(os.uname().release, strict_arp).items():
        path = f"/proc/sys/{name}"
        with open(path) as f:
            old = f.read().strip()
        if old != value:
            with open(path, "w") as f:
                f.write(value)
            changed[name] = (old, value)
    return changed


def _run(argv: list[str], stdin: str | None = None) -> str:
    p = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {p.stderr.strip()[:1000]}")
    return p.stdout


class IpvsProxier:
    """Blocking; call it from the proxy's netns worker thread (netlink sockets bind to that netns)."""

    name = "ipvs"

    def __init__(self, node: NodeConfig, scheduler: str = "rr", strict_arp: str | bool = False) -> None:
        if scheduler not in SCHEDULERS:
            raise ValueError(f"unknown IPVS scheduler {scheduler!r} (one of {', '.join(SCHEDULERS)})")
        self.node = node
        self.scheduler = scheduler
        self.strict_arp = (strict_arp if isinstance(strict_arp, bool)
                           else strict_arp.lower() in ("1", "true", "yes"))
        self.applied = Desired()
        from kernel import iptables

        self.ipt = f"iptables-{iptables.backend()}"  # the node's one iptables backend

    # -- kernel state ------------------------------------------------------------------------------
    def _ensure_base(self) -> None:
        from pyroute2 import IPRoute

        with IPRoute() as ipr:
            if not ipr.link_lookup(ifname=DUMMY):
                ipr.link("add", ifname=DUMMY, kind="dummy")
        for name, (old, new) in ensure_sysctls(self.strict_arp).items():
            log.info("sysctl %s: %s -> %s", name.replace("/", "."), old, new)
        _run(["ipset", "restore", "-exist"],
             "".join(f"create {name} {kind}" + (" range 0-65535" if kind.startswith("bitmap") else "") + "\n"
                     for name, kind in IPSETS.items()))
        _run([f"{self.ipt}-restore", "-w", "--noflush"], iptables_rules(self.node))
        for chain, target, comment in JUMPS:
            self._delete_jump(chain, target)  # the uncommented jump of earlier versions
            spec = ["-m", "comment", "--comment", comment, "-j", target]
            check = subprocess.run([self.ipt, "-w", "-t", "nat", "-C", chain, *spec], capture_output=True)
            if check.returncode != 0:
                _run([self.ipt, "-w", "-t", "nat", "-I", chain, *spec])
        for chain, target, comment in FILTER_JUMPS:
            spec = [*NEW, "-m", "comment", "--comment", comment, "-j", target]
            if subprocess.run([self.ipt, "-w", "-t", "filter", "-C", chain, *spec],
                              capture_output=True).returncode != 0:
                _run([self.ipt, "-w", "-t", "filter", "-I", chain, *spec])

    def _delete_jump(self, chain: str, target: str, comment: str | None = None) -> None:
        spec = ["-m", "comment", "--comment", comment] if comment else []
        while subprocess.run([self.ipt, "-w", "-t", "nat", "-D", chain, *spec, "-j", target],
                             capture_output=True).returncode == 0:
            pass

    def read_kernel(self) -> Desired:
        from pyroute2 import IPVS, IPRoute, IPVSDest, IPVSService

        d = Desired(ipsets={name: set() for name in IPSETS})
        with IPVS() as ipvs:
            for msg in ipvs.service("dump"):
                svc = IPVSService.from_message(msg)
                key = (svc["addr"], PROTO_NAME.get(svc["protocol"], str(svc["protocol"])), svc["port"])
                dumped = (IPVSDest.from_message(m) for m in ipvs.dest("dump", service=svc))
                dests = frozenset((dst["addr"], dst["port"], dst["weight"]) for dst in dumped)
                persistent = svc.get("flags", {}).get("flags", 0) & IP_VS_SVC_F_PERSISTENT
                d.services[key] = VirtualServer(svc["sched_name"], svc["timeout"] if persistent else 0, dests)
        with IPRoute() as ipr:
            idx = ipr.link_lookup(ifname=DUMMY)
            if idx:
                d.addresses = {a.get_attr("IFA_ADDRESS")
                               for a in ipr.get_addr(index=idx[0], family=socket.AF_INET)}
        for name in IPSETS:
            out = subprocess.run(["ipset", "list", name], capture_output=True, text=True).stdout
            members = out.split("Members:\n", 1)[1] if "Members:\n" in out else ""
            d.ipsets[name] = {ln.strip() for ln in members.splitlines() if ln.strip()}
        return d

    # -- syncing -----------------------------------------------------------------------------------
    def sync(self, state: ProxyState, changes: Changes, full: bool) -> SyncResult:
        desired = plan(state.services, state.endpoints, self.node, self.scheduler)
        if full:
            self._ensure_base()
            current = self.read_kernel()
        else:
            current = self.applied
        ops = diff(current, desired)
        self.apply(ops)
        self.applied = desired
        return SyncResult(full=full, rules=sum(len(v.dests) for v in desired.services.values()),
                          chains=len(desired.services), detail=f"{len(ops)} operations")

    def apply(self, ops: list[tuple]) -> None:
        from pyroute2 import IPVS, IPRoute, IPVSDest, IPVSService

        def service(key, vs: VirtualServer | None = None) -> IPVSService:
            ip, proto, port = key
            kw = {"addr": ip, "port": port, "protocol": PROTO[proto]}
            if vs is not None:
                kw["sched_name"] = vs.scheduler
                if vs.persistence:
                    kw["flags"] = {"flags": IP_VS_SVC_F_PERSISTENT, "mask": 0xFFFF}
                    kw["timeout"] = vs.persistence
            return IPVSService(**kw)

        ipset_lines = []
        with IPVS() as ipvs, IPRoute() as ipr:
            idx = ipr.link_lookup(ifname=DUMMY)
            for op in ops:
                kind = op[0]
                if kind == "add-addr" and idx:
                    ipr.addr("add", index=idx[0], address=op[1], prefixlen=32)
                elif kind == "del-addr" and idx:
                    ipr.addr("del", index=idx[0], address=op[1], prefixlen=32)
                elif kind == "add-vs":
                    ipvs.service("add", service=service(op[1], op[2]))
                elif kind == "edit-vs":
                    ipvs.service("set", service=service(op[1], op[2]))
                elif kind == "del-vs":
                    ipvs.service("del", service=service(op[1]))
                elif kind in ("add-dest", "del-dest"):
                    ip, port, weight = op[2]
                    ipvs.dest("add" if kind == "add-dest" else "del", service=service(op[1]),
                              dest=IPVSDest(addr=ip, port=port, weight=weight, fwd_method=FWD_MASQ))
                elif kind in ("add-entry", "del-entry"):
                    ipset_lines.append(f"{'add' if kind == 'add-entry' else 'del'} {op[1]} {op[2]}")
        if ipset_lines:
            _run(["ipset", "restore", "-exist"], "\n".join(ipset_lines) + "\n")

    def cleanup(self) -> None:
        from pyroute2 import IPVS, IPRoute, IPVSService

        from kernel.netlink import delete_link

        with IPVS() as ipvs:
            for key in list(self.read_kernel().services):
                ip, proto, port = key
                ipvs.service("del", service=IPVSService(addr=ip, port=port, protocol=PROTO[proto]))
        with IPRoute() as ipr:
            delete_link(ipr, DUMMY)
        for chain, target, comment in JUMPS:
            self._delete_jump(chain, target, comment)
            self._delete_jump(chain, target)
        for chain, target, comment in FILTER_JUMPS:
            spec = [*NEW, "-m", "comment", "--comment", comment, "-j", target]
            while subprocess.run([self.ipt, "-w", "-t", "filter", "-D", chain, *spec],
                                 capture_output=True).returncode == 0:
                pass
        for verb in ("-F", "-X"):  # every chain flushed before any is deleted: they jump to each other
            for chain in NAT_CHAINS:
                subprocess.run([self.ipt, "-w", "-t", "nat", verb, chain], capture_output=True)
            for chain in FILTER_CHAINS:
                subprocess.run([self.ipt, "-w", "-t", "filter", verb, chain], capture_output=True)
        for name in IPSETS:
            subprocess.run(["ipset", "destroy", name], capture_output=True)
        self.applied = Desired()
