"""What `nodeagent reset` removes beyond the pods and the pod bridge: the ingress HAProxy of the data dir,
the pod network's routes, tunnel device and masquerade exemption a killed agent left (host-gw, vxlan,
ipip), and, with --all, the cluster's entries in the invoking user's kubeconfig. Each part tolerates
what is already gone."""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from nodeagent.layout import Layout

log = logging.getLogger("nodeagent.reset")


def haproxy_pids(config: str) -> list[int]:
    """HAProxy processes (master and workers) running the config file `config`."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]).startswith(b"haproxy") and config.encode() in argv:
            out.append(int(d.name))
    return out


def stop_ingress_proxy(layout: Layout, grace_s: float = 5.0) -> int:
    """SIGTERM the data dir's HAProxy (SIGKILL after `grace_s`) and remove its admin socket; the number
    of processes stopped."""
    config = str(Path(layout.ingress_dir, "haproxy.cfg"))
    pids = haproxy_pids(config)
    n = len(pids)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + grace_s
    while pids and time.monotonic() < end:
        time.sleep(0.1)
        pids = [p for p in pids if Path(f"/proc/{p}").exists()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(Path(layout.ingress_dir, "admin.sock"))
    if n:
        print(f"ingress haproxy of {layout.data_dir}: {n} process(es) stopped")
    return n


def remove_pod_network(cluster_cidr: str) -> list[str]:
    """The multi-node pod network a killed agent left for `cluster_cidr`: its routes (protocol
    RTPROT_NODENET, to node subnets inside the cluster range), the tunnel device once no route of ours
    is left (vxlan deleted; tunl0 flushed and down: the kernel owns it), and the masquerade exemption.
    What was removed, for the person reading."""
    from kernel.netlink import IPRoute, delete_link, get_link
    from nodeagent.nodenet import masq
    from nodeagent.nodenet import plan as P
    from nodeagent.nodenet.dataplane import RTPROT_NODENET

    cluster = ipaddress.ip_network(cluster_cidr, strict=False)
    done: list[str] = []
    with IPRoute() as ipr:
        left = 0
        for r in ipr.get_routes(family=socket.AF_INET, table=254):
            if r["proto"] != RTPROT_NODENET:
                continue
            dst = ipaddress.ip_network(f"{r.get_attr('RTA_DST')}/{r['dst_len']}", strict=False)
            if not dst.subnet_of(cluster):  # type: ignore[arg-type]  # both IPv4 here
                left += 1
                continue
            try:
                ipr.route("del", table=254, proto=RTPROT_NODENET, dst=str(dst))
            except Exception as e:  # pyroute2's NetlinkError: gone already is fine
                if getattr(e, "code", None) not in (errno.ENOENT, errno.ESRCH):
                    raise
            done.append(f"route {dst}")
        for mode in ("vxlan", "ipip"):
            device = P.device_for(mode)
            link = get_link(ipr, device) if device else None
            if device is None or link is None or left:
                continue
            if mode == "vxlan":
                delete_link(ipr, device)
                done.append(f"link {device}")
            elif link.get_attr("IFLA_OPERSTATE") != "DOWN" or ipr.get_addr(index=link["index"]):
                ipr.flush_addr(index=link["index"])
                ipr.link("set", index=link["index"], state="down")
                done.append(f"link {device} (down)")
    for node in _exempt_nodes(cluster_cidr):
        masq.remove(str(cluster), node)
        done.append(f"masquerade exemption of node {node}")
    for what in done:
        print(f"pod network: {what}: removed")
    return done


def _exempt_nodes(cluster_cidr: str) -> list[str]:
    """The nodes whose `nodeagent/nodenet node=<name>` exemption for `cluster_cidr` is in nat POSTROUTING."""
    from kernel.iptables import backend

    net = str(ipaddress.ip_network(cluster_cidr, strict=False))
    p = subprocess.run([f"iptables-{backend()}-save", "-t", "nat"], capture_output=True, text=True,
                       check=False)
    nodes = []
    for line in p.stdout.splitlines():
        if line.startswith(f"-A POSTROUTING -s {net} -d {net} ") and "nodeagent/nodenet node=" in line:
            nodes.append(line.split("nodeagent/nodenet node=", 1)[1].split('"', 1)[0])
    return nodes


def remove_user_context(layout: Layout, extra: str | None = None) -> list[str]:
    """--all: the cluster, user and context `up` merged into the invoking user's ~/.kube/config (and into
    `extra`, a `--write-kubeconfig` PATH); the files that held them."""
    from nodeagent.apiserver.kubeconfig import KubeconfigError, UserKubeconfig, remove_for_user
    from nodeagent.commands.user_kubeconfig import invoking_user

    home, uid, gid = invoking_user()
    paths = [home / ".kube" / "config", *([Path(extra).expanduser()] if extra else [])]
    out = []
    for path in paths:
        try:
            if remove_for_user(UserKubeconfig(str(path), layout.kube_context, uid, gid)):
                out.append(str(path))
                print(f"kubeconfig {path}: context {layout.kube_context} removed")
        except (KubeconfigError, OSError) as e:
            print(f"kubeconfig {path}: left as it is ({e})")
    return out
