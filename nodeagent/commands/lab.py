"""`nodeagent lab up|down`: a cluster of network-namespace nodes on this machine (see nodeagent.lab)."""

from __future__ import annotations

import argparse

DEFAULT_DIR = "/var/lib/nodeagent-lab"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="lab_command", required=True)
    u = sub.add_parser("up",
                       help="start N netns nodes (node1 also runs the server); returns once all are Ready")
    u.add_argument("--nodes", type=int, default=2, help="number of nodes (default: %(default)s)")
    u.add_argument("--network", default="host-gw", choices=("host-gw", "ipip", "vxlan", "bgp"),
                   help="cross-node pod network; bgp: BIRD in every node namespace, each with its own "
                        "control socket (<dir>/nodeN/bird/bird.ctl) (default: %(default)s)")
    u.add_argument("--bgp-route-reflectors", default=None, metavar="NODE[,NODE]",
                   help="with --network bgp: these nodes reflect routes instead of a full mesh")
    u.add_argument("--bgp-advertise-service-cluster-ips", action="store_true",
                   help="with --network bgp: announce the ClusterIP range to BGPPeer routers")
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
            server_args = []
            if args.bgp_route_reflectors:
                server_args += ["--bgp-route-reflectors", args.bgp_route_reflectors]
            if args.bgp_advertise_service_cluster_ips:
                server_args.append("--bgp-advertise-service-cluster-ips")
            topo = cluster.up(args.dir, args.nodes, args.network, args.image,
                              node_monitor_grace_period=args.node_monitor_grace_period, timeout=args.timeout,
                              server_args=server_args)
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
