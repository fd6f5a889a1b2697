"""`nodeagent status [--data-dir DIR]`: the node at a glance for a person at a terminal (rich tables).

What runs (the `up`/`agent` process of the data dir, its runtime socket, the apiserver's readiness
checks), the eviction signals against the thresholds that process was given, the node's conditions
(Ready and the pressure the eviction manager reports), its pods with their IPs and QoS classes, and how
many Service and policy rules are in the kernel. Every part that cannot be read says why instead of being
left out.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
from typing import Any

from nodeagent.layout import DEFAULT_DATA_DIR, Layout


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help="the node's state directory (default: %(default)s)")
    p.add_argument("--kubeconfig", default=None,
                   help="the cluster's credential (default: the data dir's admin.kubeconfig)")


async def read_cluster(kubeconfig: str) -> dict[str, Any]:
    """The apiserver's readiness checks, the nodes and the pods; an unreachable apiserver is an error
    entry."""
    from nodeagent.client.rest import Client, ClientError

    try:
        client = Client.from_kubeconfig(kubeconfig)
    except (OSError, KeyError, ValueError) as e:
        return {"error": f"{kubeconfig}: {e}"}
    try:
        readyz = await client.request("GET", "/readyz", params={"verbose": "true"})
        nodes = await client.list("nodes")
        pods = await client.list("pods")
    except (TimeoutError, ClientError, OSError) as e:
        return {"error": f"the apiserver did not answer: {e}"}
    finally:
        await client.close()
    return {"readyz": str(readyz), "nodes": nodes.get("items", []), "pods": pods.get("items", [])}


def rule_counts() -> dict[str, str]:
    """Rules in the kernel by owner: kube-proxy's iptables chains and nftables table, NetworkPolicy's."""
    out: dict[str, str] = {}
    if shutil.which("iptables-save"):
        nat = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True,
                             check=False).stdout
        rules = [ln for ln in nat.splitlines() if ln.startswith("-A KUBE-")]
        out["iptables KUBE-* rules (nat)"] = str(len(rules))
        out["iptables Services (KUBE-SVC-* chains)"] = str(
            len({ln.split()[1] for ln in rules if ln.startswith("-A KUBE-SVC-")}))
        out["iptables endpoints (KUBE-SEP-* chains)"] = str(
            len({ln.split()[1] for ln in rules if ln.startswith("-A KUBE-SEP-")}))
    if shutil.which("nft"):
        p = subprocess.run(["nft", "list", "table", "ip", "kube-proxy"], capture_output=True, text=True,
                           check=False)
        out["nftables table ip kube-proxy"] = (
            f"{sum(1 for ln in p.stdout.splitlines() if ln.startswith(chr(9) * 2))} rules"
            if p.returncode == 0 else "absent")
    return out


def render(layout: Layout, pid: int | None, cluster: dict[str, Any], rules: dict[str, str],
           eviction: list[tuple[str, str, str, str, str]] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    parts = Table(title=f"nodeagent on {layout.data_dir}", show_lines=False)
    parts.add_column("component")
    parts.add_column("status")
    parts.add_row("up / agent", f"[green]running[/] (pid {pid})" if pid else "[red]not running[/]")
    parts.add_row("runtime (CRI)", f"socket {layout.cri_socket}" + ("" if os.path.exists(layout.cri_socket)
                                                                      else " [red]absent[/]"))
    if "error" in cluster:
        parts.add_row("apiserver", f"[red]{cluster['error']}[/]")
    else:
        for line in cluster["readyz"].splitlines():
            if line.startswith(("[+]", "[-]")):
                check = line[3:]
                parts.add_row(f"apiserver {check.split()[0]}",
                              "[green]ok[/]" if line.startswith("[+]") else f"[red]{check}[/]")
    console.print(parts)
    if eviction:
        signals = Table(title="eviction signals (as the kubelet observes them here)")
        for col in ("signal", "available", "capacity", "threshold", "crossed"):
            signals.add_column(col)
        for row in eviction:
            signals.add_row(*row[:4], f"[red]{row[4]}[/]" if row[4] == "yes" else row[4])
        console.print(signals)
    if "error" in cluster:
        return
    nodes = Table(title="nodes")
    for col in ("node", "Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "podCIDR"):
        nodes.add_column(col)
    for n in cluster["nodes"]:
        conds = {c.get("type"): c.get("status") for c in n.get("status", {}).get("conditions", [])}
        nodes.add_row(n["metadata"]["name"], *(_cond(t, conds.get(t, "?")) for t in (
            "Ready", "MemoryPressure", "DiskPressure", "PIDPressure")), n.get("spec", {}).get("podCIDR", ""))
    console.print(nodes)
    pods = Table(title="pods")
    for col in ("namespace", "pod", "phase", "IP", "QoS", "node"):
        pods.add_column(col)
    for p in cluster["pods"]:
        st = p.get("status", {})
        pods.add_row(p["metadata"].get("namespace", ""), p["metadata"]["name"], st.get("phase", ""),
                     st.get("podIP", ""), st.get("qosClass", ""), p.get("spec", {}).get("nodeName", ""))
    console.print(pods)
    kernel = Table(title="rules in the kernel")
    kernel.add_column("what")
    kernel.add_column("count")
    for k, v in rules.items():
        kernel.add_row(k, v)
    console.print(kernel)


def _cond(kind: str, status: str) -> str:
    good = "True" if kind == "Ready" else "False"
    return f"[green]{status}[/]" if status == good else f"[red]{status}[/]"


def run(args: argparse.Namespace) -> int:
    from nodeagent.commands.reset import holder_pid
    from nodeagent.commands.status_eviction import eviction_rows, flags_of

    layout = Layout.for_data_dir(os.path.abspath(args.data_dir))
    cluster = asyncio.run(read_cluster(args.kubeconfig or layout.admin_kubeconfig))
    pid = holder_pid(layout)
    render(layout, pid, cluster, rule_counts(), eviction_rows(layout, flags_of(pid)))
    return 0 if "error" not in cluster else 1
