"""Masquerade only for traffic leaving the cluster CIDR.

The bridge plugin's per-network chain masquerades everything from its pods that is not for its own
subnet; across nodes that would hide pod addresses. One rule in nat POSTROUTING returns
cluster-to-cluster traffic before that chain (flannel's `-s cluster -d cluster -j RETURN`). It goes
after the Service proxy's `kubernetes postrouting rules` jump, never before it: a pod reaching itself
through its Service (hairpin) is cluster-to-cluster too, and only that chain's masquerade makes the
reply come back through the Service. The bridge plugin appends its rules, so right after the proxy's
jump (or first, without one) is still before them. Tagged with the node's name so several agents on one
host each remove only their own.
"""

from __future__ import annotations

import ipaddress
import subprocess

from kernel import iptables


def _rule(cluster_cidr: str, node: str) -> list[str]:
    return ["-s", cluster_cidr, "-d", cluster_cidr, "-m", "comment", "--comment",
            f"nodeagent/nodenet node={node}", "-j", "RETURN"]


def _iptables(*args: str) -> subprocess.CompletedProcess:
    exe = f"iptables-{iptables.backend()}"
    return subprocess.run([exe, "-w", "5", "-t", "nat", *args], capture_output=True, text=True, check=False)


PROXY_JUMP_COMMENT = "kubernetes postrouting rules"  # kube-proxy's (and netproxy's) jump to its masquerade


def _positions(cluster_cidr: str, node: str) -> tuple[list[int], int]:
    """1-based positions in nat POSTROUTING of the proxy's jumps, and the last of ours (0: absent)."""
    p = _iptables("-S", "POSTROUTING")
    if p.returncode != 0:
        raise RuntimeError(f"cannot list nat POSTROUTING: {p.stderr.strip()}")
    rules = [line for line in p.stdout.splitlines() if line.startswith("-A POSTROUTING ")]
    jumps = [i for i, r in enumerate(rules, 1) if PROXY_JUMP_COMMENT in r]
    cidr = str(ipaddress.ip_network(cluster_cidr, strict=False))
    ours = [i for i, r in enumerate(rules, 1)
            if f'"nodeagent/nodenet node={node}"' in r and f"-s {cidr} -d {cidr} " in r]
    return jumps, (ours[-1] if ours else 0)


def ensure(cluster_cidr: str, node: str) -> None:
    jumps, ours = _positions(cluster_cidr, node)
    if ours and all(j < ours for j in jumps):
        return
    if ours:  # before the proxy's jump (it was added later, or moved): put it back after it
        remove(cluster_cidr, node)
        jumps, _ = _positions(cluster_cidr, node)
    p = _iptables("-I", "POSTROUTING", str(max(jumps, default=0) + 1), *_rule(cluster_cidr, node))
    if p.returncode != 0:
        raise RuntimeError(f"cannot add the cluster masquerade exemption: {p.stderr.strip()}")


def remove(cluster_cidr: str, node: str) -> None:
    while _iptables("-D", "POSTROUTING", *_rule(cluster_cidr, node)).returncode == 0:
        pass


def present(cluster_cidr: str, node: str) -> bool:
    return _iptables("-C", "POSTROUTING", *_rule(cluster_cidr, node)).returncode == 0


# -- Service ranges announced over BGP ----------------------------------------------------------------------
# A router outside the cluster sends ClusterIP traffic to any node (ECMP); the node's proxy DNATs it to a pod
# that may live on another node, whose reply would go straight back to the router from the pod's address.
# Masquerading what comes from outside the cluster CIDR to a Service range (kube-proxy's --cluster-cidr
# rule) brings the reply back through this node.


def _service_rule(cluster_cidr: str, service_cidr: str, node: str) -> list[str]:
    return ["!", "-s", str(ipaddress.ip_network(cluster_cidr, strict=False)), "-m", "conntrack", "--ctstate",
            "DNAT", "--ctorigdst", str(ipaddress.ip_network(service_cidr, strict=False)), "-m", "comment",
            "--comment", f"nodeagent/nodenet services node={node}", "-j", "MASQUERADE"]


def ensure_service_snat(cluster_cidr: str, service_cidr: str, node: str) -> None:
    rule = _service_rule(cluster_cidr, service_cidr, node)
    if _iptables("-C", "POSTROUTING", *rule).returncode == 0:
        return
    p = _iptables("-A", "POSTROUTING", *rule)
    if p.returncode != 0:
        raise RuntimeError(f"cannot add the masquerade for announced Service ranges: {p.stderr.strip()}")


def remove_service_snat(cluster_cidr: str, service_cidr: str, node: str) -> None:
    while _iptables("-D", "POSTROUTING", *_service_rule(cluster_cidr, service_cidr, node)).returncode == 0:
        pass
