"""`nodeagent dns`: the cluster DNS server in the foreground."""

from __future__ import annotations

import argparse

from nodeagent.layout import Layout


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", default=Layout.default().admin_kubeconfig,
                   help="kubeconfig of the apiserver to watch (default: %(default)s)")
    p.add_argument("--listen", default="0.0.0.0:53", metavar="ADDR:PORT",
                   help="UDP and TCP address to serve on (default: %(default)s)")
    p.add_argument("--cluster-domain", default="cluster.local",
                   help="the cluster's DNS zone (default: %(default)s)")
    p.add_argument("--upstream", action="append", default=None, metavar="ADDR[:PORT]",
                   help="resolver for names outside the cluster domain; repeatable "
                        "(default: the nameservers in /etc/resolv.conf)")
    p.add_argument("--ttl", type=int, default=30,
                   help="TTL of cluster answers, seconds (default: %(default)s)")
    p.add_argument("--pods", default="insecure", choices=["insecure", "verified", "disabled"],
                   help="<a-b-c-d>.<ns>.pod records: any address, only live pods', or none (default: "
                        "%(default)s)")
    p.add_argument("--register-service", action="store_true",
                   help="create/repair kube-system/kube-dns (ClusterIP --service-ip) pointing at this server")
    p.add_argument("--service-ip", default="10.96.0.10",
                   help="the kube-dns ClusterIP to register (default: %(default)s)")
    p.add_argument("--advertise-address", default=None,
                   help="address the kube-dns endpoint points at (default: the listen address, "
                        "or the default route's when listening on all)")


def config_from_args(args: argparse.Namespace):
    from nodeagent.apiserver.server import advertise_ip
    from nodeagent.commands.configs import cli_errors
    from nodeagent.dns.config import DNSConfig
    from nodeagent.dns.server import split_hostport

    with cli_errors("dns"):
        # the kube-dns endpoint: --advertise-address, else the listen address, or the default route's
        # when listening on every address
        advertise = args.advertise_address or advertise_ip(split_hostport(args.listen)[0])
        return DNSConfig(kubeconfig=args.kubeconfig, listen=args.listen, cluster_domain=args.cluster_domain,
                         upstreams=args.upstream, ttl=args.ttl, pods=args.pods,
                         register_service=args.register_service, service_ip=args.service_ip,
                         advertise_address=advertise)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import sys
    from pathlib import Path

    from nodeagent.dns.service import serve
    from nodeagent.runner import Component, run_components

    if not Path(args.kubeconfig).is_file():
        print(f"nodeagent dns: no kubeconfig at {args.kubeconfig} (--kubeconfig)", file=sys.stderr)
        return 1

    cfg = config_from_args(args)
    del serve  # imported to fail early if the DNS server cannot load
    failed: OSError | None = None
    try:
        return asyncio.run(run_components([Component("dns", "nodeagent.dns.service:serve", "the DNS issue")],
                                          {"dns": cfg}))
    except* OSError as eg:  # e.g. the address is in use, or port 53 needs root
        failed = _first(eg)
    print(f"nodeagent dns: cannot serve on {args.listen}: {failed}", file=sys.stderr)
    return 1


def _first(eg: BaseExceptionGroup[OSError]) -> OSError:
    e: OSError | BaseExceptionGroup[OSError] = eg
    while isinstance(e, BaseExceptionGroup):
        e = e.exceptions[0]
    return e
