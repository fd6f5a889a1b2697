"""`nodeagent lab up|down`: a cluster of network-namespace nodes on this machine (see nodeagent.lab)."""

from __future__ import annotations

import argparse

DEFAULT_DIR = "/var/lib/nodeagent-lab"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="lab_command", required=True)
    u = sub.add_parser("up",
                       help="start N netns nodes (node1 also runs the server); returns once all are Ready")
    u.add_argument("--nodes", type=int, default=2, help="number of nodes (default: %(default)s)")
    u.add_argument("--network", default="host-gw", choices=("host-gw", "ipip", "vxlan"),
                   help="cross-node pod network (default: %(default)s)")
    u.add_argument("--dir", default=DEFAULT_DIR, help="lab state directory (default: %(default)s)")
    u.add_argument("--image", action="append", default=[], metavar="ARCHIVE",
                   help="docker-archive/OCI image to import on every node (repeatable)")
    u.add_argument("--node-monitor-grace-period", type=float, default=40.0,
                   help="seconds without heartbeat before a node is NotReady (default: %(default)s)")
    u.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for Ready nodes")
    d = sub.add_parser("down", help="stop and remove everything a lab made")
    d.add_argument("--dir", default=DEFAULT_DIR, help="lab state directory (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    import sys

    from nodeagent.lab import cluster

    try:
        if args.lab_command == "up":
            topo = cluster.up(args.dir, args.nodes, args.network, args.image,
                              node_monitor_grace_period=args.node_monitor_grace_period, timeout=args.timeout)
            cidrs = cluster.pod_cidrs(topo.kubeconfig)
            for n in topo.nodes:
                print(f"{n.name}: netns {n.netns}, address {n.address}, pods {cidrs.get(n.name) or '?'}")
            print(f"kubeconfig: {topo.kubeconfig}")
            print(f"export KUBECONFIG={topo.kubeconfig}")
            return 0
        forced = cluster.down(args.dir)
        for f in forced:
            print(f"forced: {f}", file=sys.stderr)
        print(f"lab in {args.dir} removed")
        return 0
    except cluster.LabError as e:
        print(f"nodeagent lab: {e}", file=sys.stderr)
        return 1
