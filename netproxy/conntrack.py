"""Clearing UDP conntrack entries that still point at endpoints which went away.

Without this, a UDP client keeps sending to a dead pod for as long as its flow
stays in the table (kube-proxy's conntrack cleanup). Uses the conntrack tool,
run from the proxier's netns worker so it acts on that namespace's table.
"""

from __future__ import annotations

import logging
import re
import subprocess
from collections.abc import Iterable

from netproxy.model import Endpoint, ServicePort

log = logging.getLogger("netproxy.conntrack")


def _delete(args: list[str]) -> int:
    p = subprocess.run(["conntrack", "-D", *args], capture_output=True, text=True, check=False)
    # exit 1 with "0 flow entries" just means nothing matched
    if p.returncode not in (0, 1):
        log.warning("conntrack -D %s: %s", " ".join(args), p.stderr.strip())
    m = re.search(r"(\d+) flow entries have been deleted", p.stderr + p.stdout)
    return int(m.group(1)) if m else 0


def service_vips(sp: ServicePort) -> list[str]:
    return [ip for ip in (sp.cluster_ip, *sp.external_ips, *sp.load_balancer_ips) if ip]


def clear_stale(stale_endpoints: Iterable[tuple[ServicePort, Endpoint]],
                stale_services: Iterable[ServicePort]) -> int:
    """Delete UDP flows DNATed to removed endpoints, and flows to Services that just got endpoints."""
    n = 0
    done: set[tuple[str, ...]] = set()
    for sp, ep in stale_endpoints:
        if sp.protocol != "UDP":
            continue
        for vip in service_vips(sp):
            args = ["-p", "udp", "--orig-dst", vip, "--orig-port-dst", str(sp.port), "--dst-nat", ep.ip]
            if tuple(args) not in done:
                done.add(tuple(args))
                n += _delete(args)
        if sp.node_port:
            args = ["-p", "udp", "--orig-port-dst", str(sp.node_port), "--dst-nat", ep.ip]
            if tuple(args) not in done:
                done.add(tuple(args))
                n += _delete(args)
    for sp in stale_services:
        if sp.protocol != "UDP":
            continue
        for vip in service_vips(sp):
            n += _delete(["-p", "udp", "--orig-dst", vip, "--orig-port-dst", str(sp.port)])
        if sp.node_port:
            n += _delete(["-p", "udp", "--orig-port-dst", str(sp.node_port)])
    return n
