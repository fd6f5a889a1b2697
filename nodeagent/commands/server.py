"""`nodeagent server`: the control plane's apiserver alone, in the foreground."""

from __future__ import annotations

import argparse

# The components `server` runs beside the apiserver; each can be left out with --without.
OPTIONAL = {
    "scheduler": ("nodeagent.scheduler.service:serve", "the scheduler issue"),
    "controllers": ("nodeagent.controllers.manager:serve", "the controllers issue"),
    "dns": ("nodeagent.dns.service:serve", "the DNS issue"),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default="/var/lib/nodeagent", help="state directory (default: %(default)s)")
    p.add_argument("--bind-address", default="0.0.0.0", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=6443, help="HTTPS port (default: %(default)s; 0 picks a free one)")
    p.add_argument("--datastore", default="sqlite",
                   help="sqlite, memory, or etcd://HOST:PORT (default: %(default)s)")
    p.add_argument("--service-cluster-ip-range", default="10.96.0.0/12",
                   help="CIDR Service ClusterIPs come from (default: %(default)s)")
    p.add_argument("--without", action="append", default=[], choices=sorted(OPTIONAL),
                   help="do not run this control-plane component (repeatable), e.g. to run your own")
    p.add_argument("--lease-duration", type=int, default=15,
                   help="seconds an apiserver's identity lease lasts; the `kubernetes` endpoints drop a server "
                        "that stops renewing it (default: %(default)s)")
    p.add_argument("--advertise-address", default=None,
                   help="IP other nodes reach this server on (default: the bind address, or the default route's)")


def run(args: argparse.Namespace) -> int:
    import asyncio

    from nodeagent.apiserver.server import ServerConfig, serve
    from nodeagent.runner import Component, run_components

    cfg = ServerConfig(data_dir=args.data_dir, bind_address=args.bind_address, port=args.port,
                       datastore=args.datastore, service_cluster_ip_range=args.service_cluster_ip_range,
                       advertise_address=args.advertise_address, lease_duration=args.lease_duration)
    del serve  # imported to fail early if the apiserver cannot load
    components = [Component("apiserver", "nodeagent.apiserver.server:serve", "the apiserver issue")]
    components += [Component(name, target, issue, after=("apiserver",))
                   for name, (target, issue) in OPTIONAL.items() if name not in args.without]
    return asyncio.run(run_components(components, cfg))
