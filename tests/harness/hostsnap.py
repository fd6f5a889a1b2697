"""A snapshot of the host state a test could leak, and the difference of two snapshots.

Covered: named network namespaces, root-netns links, IPv4 routes and rules,
cgroups (every v1 hierarchy and the v2 tree), mounts, iptables (legacy and nft
backends, v4 and v6), nftables objects, ipsets, IPVS services, files under the
node's state directories, and processes descended from the test session.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from kernel.cgroups import hierarchies
from kernel.mounts import mountinfo

STATE_DIRS = (
    "/var/lib/nodeagent",
    "/run/nodeagent",
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/cni",
    "/etc/cni/net.d",
    "/etc/nodeagent",
)

XTABLES_TABLES = {"filter", "nat", "mangle", "raw", "security"}
XTABLES_BASE_CHAINS = {"INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"}


def _run(argv: list[str]) -> str:
    if not shutil.which(argv[0]):
        return ""
    p = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    return p.stdout if p.returncode == 0 else ""


def netns_names() -> set[str]:
    try:
        return set(os.listdir("/run/netns"))
    except FileNotFoundError:
        return set()


# Per-netns fallback devices a tunnel module creates when it loads (`modprobe ipip` makes tunl0) and
# that cannot be deleted: one that appeared is the kernel's doing, one left up is a test's.
KERNEL_FALLBACK_LINKS = {"tunl0", "gre0", "gretap0", "erspan0", "ip_vti0", "ip6_vti0", "sit0", "ip6tnl0",
                         "ip6gre0"}
IFF_UP = 0x1


def _link_up(name: str) -> bool:
    try:
        return bool(int(Path(f"/sys/class/net/{name}/flags").read_text(), 16) & IFF_UP)
    except (OSError, ValueError):
        return False


def links() -> set[str]:
    return {n for n in os.listdir("/sys/class/net") if n not in KERNEL_FALLBACK_LINKS or _link_up(n)}


def routes() -> set[str]:
    out = set()
    for line in _run(["ip", "-4", "-o", "route", "show", "table", "all"]).splitlines():
        out.add("route " + " ".join(line.split()))
    for line in _run(["ip", "-4", "rule", "show"]).splitlines():
        out.add("rule " + " ".join(line.split()))
    return out


def cgroups() -> set[str]:
    out = set()
    for root in hierarchies():
        for dirpath, dirnames, _ in os.walk(root):
            for d in dirnames:
                out.add(os.path.join(dirpath, d))
    return out


def mounts() -> set[str]:
    return {f"{m.point} ({m.fstype})" for m in mountinfo()}


_COUNTERS = re.compile(r"\[\d+:\d+\]")


def iptables() -> set[str]:
    out = set()
    for cmd in ("iptables-legacy-save", "ip6tables-legacy-save", "iptables-nft-save", "ip6tables-nft-save"):
        table = "?"
        for line in _run([cmd]).splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":"):
                name = line[1:].split()[0]
                if name in XTABLES_BASE_CHAINS:
                    continue
                out.add(f"{cmd} {table} chain {name}")
            elif line.startswith("-"):
                out.add(f"{cmd} {table} {_COUNTERS.sub('', line).strip()}")
    return out


def _strip_handles(obj):
    """A rule's identity: without its handle, and with its counters' values zeroed (traffic moves them)."""
    if isinstance(obj, dict):
        return {k: (_zero_counter(v) if k == "counter" else _strip_handles(v)) for k, v in obj.items()
                if k != "handle"}
    if isinstance(obj, list):
        return [_strip_handles(v) for v in obj]
    return obj


def _zero_counter(v):
    return {k: 0 for k in v} if isinstance(v, dict) else v


def nftables() -> set[str]:
    raw = _run(["nft", "-j", "list", "ruleset"])
    if not raw:
        return set()
    try:
        items = json.loads(raw).get("nftables", [])
    except json.JSONDecodeError:
        return set()
    out = set()
    for item in items:
        (kind, body), = item.items()
        if kind == "metainfo":
            continue
        fam, table = body.get("family"), body.get("table", body.get("name"))
        xt = table in XTABLES_TABLES
        if kind == "table":
            if not xt:
                out.add(f"nft table {fam} {table}")
        elif kind == "chain":
            if not (xt and body.get("name") in XTABLES_BASE_CHAINS):
                out.add(f"nft chain {fam} {table} {body.get('name')}")
        elif kind == "rule":
            expr = json.dumps(_strip_handles(body.get("expr")))
            out.add(f"nft rule {fam} {table} {body.get('chain')} {expr}")
        else:
            spec = json.dumps(_strip_handles(body), sort_keys=True)
            out.add(f"nft {kind} {fam} {table} {body.get('name')} {spec}")
    return out


def ipsets() -> set[str]:
    return {f"ipset {n}" for n in _run(["ipset", "list", "-n"]).split()}


def ipvs() -> set[str]:
    if not os.path.exists("/proc/net/ip_vs"):
        return set()
    return {f"ipvs {line.strip()}" for line in _run(["ipvsadm", "-Ln"]).splitlines()[3:] if line.strip()}


def files(dirs: Iterable[str] = STATE_DIRS) -> set[str]:
    out = set()
    for d in dirs:
        for dirpath, dirnames, filenames in os.walk(d):
            for n in dirnames + filenames:
                out.add(os.path.join(dirpath, n))
    return out


def _proc_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (ppid, state, command line)."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        rest = stat[stat.rfind(")") + 2:].split()
        table[int(entry)] = (int(rest[1]), rest[0], cmd.strip() or stat[stat.find("(") + 1:stat.rfind(")")])
    return table


def descendants(root: int) -> dict[int, str]:
    """Live (non-zombie) descendants of `root`, pid -> command line."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        ppid, state, cmd = table[pid]
        if state != "Z":
            out[pid] = cmd
        todo.extend(children.get(pid, []))
    return out


CATEGORIES = {
    "netns": netns_names,
    "link": links,
    "route": routes,
    "cgroup": cgroups,
    "mount": mounts,
    "iptables": iptables,
    "nftables": nftables,
    "ipset": ipsets,
    "ipvs": ipvs,
    "file": files,
}


def snapshot() -> dict[str, set[str]]:
    return {name: fn() for name, fn in CATEGORIES.items()}


def leaks(before: dict[str, set[str]], after: dict[str, set[str]]) -> dict[str, list[str]]:
    """What `after` has that `before` did not, per category."""
    out = {}
    for name in CATEGORIES:
        new = sorted(after.get(name, set()) - before.get(name, set()))
        if new:
            out[name] = new
    return out
