"""Masquerade only for traffic leaving the cluster CIDR.

The bridge plugin's per-network chain masquerades everything from its pods that is not for its own
subnet; across nodes that would hide pod addresses. One rule, first in nat POSTROUTING, returns
cluster-to-cluster traffic before that chain (flannel's `-s cluster -d cluster -j RETURN`). Tagged with
the node's name so several agents on one host each remove only their own.
"""

from __future__ import annotations

import subprocess

from cni import iptables


def _rule(cluster_cidr: str, node: str) -> list[str]:
    return ["-s", cluster_cidr, "-d", cluster_cidr, "-m", "comment", "--comment", f"nodeagent/nodenet node={node}",
            "-j", "RETURN"]


def _iptables(*args: str) -> subprocess.CompletedProcess:
    exe = f"iptables-{iptables.backend()}"
    return subprocess.run([exe, "-w", "5", "-t", "nat", *args], capture_output=True, text=True, check=False)


def ensure(cluster_cidr: str, node: str) -> None:
    if _iptables("-C", "POSTROUTING", *_rule(cluster_cidr, node)).returncode != 0:
        p = _iptables("-I", "POSTROUTING", "1", *_rule(cluster_cidr, node))
        if p.returncode != 0:
            raise RuntimeError(f"cannot add the cluster masquerade exemption: {p.stderr.strip()}")


def remove(cluster_cidr: str, node: str) -> None:
    while _iptables("-D", "POSTROUTING", *_rule(cluster_cidr, node)).returncode == 0:
        pass


def present(cluster_cidr: str, node: str) -> bool:
    return _iptables("-C", "POSTROUTING", *_rule(cluster_cidr, node)).returncode == 0
