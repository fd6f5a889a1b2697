"""A test "router" for a bgp lab: BIRD 2 in a network namespace of its own on the lab's underlay, in an AS of
its own, peering (eBGP) with every node as a top-of-rack router would. Its kernel protocol merges equal paths
(`merge paths on`), so a prefix several nodes announce (the ClusterIP range) becomes one ECMP route.

Everything it makes is recorded in the lab's state before it is made, so `lab down` removes it with the rest.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

from nodeagent.lab.cluster import LabError, State, _sh
from nodeagent.lab.topology import Topology

ROUTER_AS = 64513
ROUTER_HOST = 250  # its address: <underlay prefix>.250


@dataclasses.dataclass(frozen=True)
class Router:
    netns: str
    address: str
    asn: int
    directory: str

    @property
    def socket(self) -> str:
        return str(Path(self.directory, "bird.ctl"))

    def birdc(self, *words: str) -> str:
        return _sh("ip", "netns", "exec", self.netns, "birdc", "-s", self.socket, *words).stdout

    def exec(self, *argv: str, check: bool = False) -> str:
        p = _sh("ip", "netns", "exec", self.netns, *argv, check=check)
        return p.stdout


def config(topo: Topology, address: str, asn: int, log_file: str, cluster_as: int = 64512) -> str:
    lines = [f'log "{log_file}" all;', f"router id {address};", "",
             "protocol device { scan time 2; }", "",
             "protocol direct { ipv4; }", "",
             "# what the nodes announce goes into this namespace's kernel; equal paths become one ECMP route",
             "protocol kernel {", "  ipv4 { import none; export where source = RTS_BGP; };",
             "  merge paths on;", "  scan time 2;", "}", "",
             "template bgp nodes {", f"  local {address} as {asn};", "  hold time 9;", "  keepalive time 3;",
             "  connect retry time 3;", "  error wait time 5, 30;",
             "  ipv4 { import all; export none; };", "}", ""]
    for n in topo.nodes:
        lines += [f"protocol bgp {n.name} from nodes {{", f"  neighbor {n.address} as {cluster_as};", "}", ""]
    return "\n".join(lines)


def start(topo: Topology, asn: int = ROUTER_AS, cluster_as: int = 64512) -> Router:
    """The router's namespace, link and BIRD (recorded in the lab's state first)."""
    state = State(Path(topo.lab_dir))
    netns = f"nalab-{topo.tag}-r"
    host_veth = f"nl{topo.tag}hr"
    address = f"{topo.subnet_prefix}.{ROUTER_HOST}"
    directory = str(Path(topo.lab_dir, "router"))
    os.makedirs(directory, exist_ok=True)
    state.add("netns", netns)
    _sh("ip", "netns", "add", netns)
    state.add("links", host_veth)
    _sh("ip", "link", "add", host_veth, "type", "veth", "peer", "name", f"nl{topo.tag}pr")
    _sh("ip", "link", "set", f"nl{topo.tag}pr", "netns", netns)
    _sh("ip", "-n", netns, "link", "set", f"nl{topo.tag}pr", "name", "eth0")
    _sh("ip", "link", "set", host_veth, "master", topo.bridge, "up")
    _sh("ip", "-n", netns, "addr", "add", f"{address}/24", "dev", "eth0")
    _sh("ip", "-n", netns, "link", "set", "eth0", "up")
    _sh("ip", "-n", netns, "link", "set", "lo", "up")
    conf = Path(directory, "bird.conf")
    conf.write_text(config(topo, address, asn, str(Path(directory, "bird.log")), cluster_as))
    router = Router(netns, address, asn, directory)
    pid_file = Path(directory, "bird.pid")
    _sh("ip", "netns", "exec", netns, "bird", "-c", str(conf), "-s", router.socket, "-P", str(pid_file))
    end = time.monotonic() + 10
    while not pid_file.exists():
        if time.monotonic() > end:
            raise LabError(f"the router's BIRD wrote no pid file ({pid_file})")
        time.sleep(0.05)
    state.pid("router", int(pid_file.read_text().strip()))
    return router
