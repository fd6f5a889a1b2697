"""`nodeagent ingress`: the Ingress / Gateway API controller and its HAProxy in the foreground."""

from __future__ import annotations

import argparse

from nodeagent.layout import Layout


def add_arguments(p: argparse.ArgumentParser) -> None:
    layout = Layout.default()
    p.add_argument("--kubeconfig", default=layout.admin_kubeconfig,
                   help="kubeconfig of the apiserver to watch (default: %(default)s)")
    p.add_argument("--work-dir", default=layout.ingress_dir,
                   help="where haproxy.cfg, the certificates and the admin socket live "
                        "(default: %(default)s)")
    p.add_argument("--listen-address", default="0.0.0.0", help="address to serve on (default: %(default)s)")
    p.add_argument("--ingress-http-port", type=int, default=80, help="HTTP port (default: %(default)s)")
    p.add_argument("--ingress-https-port", type=int, default=443, help="HTTPS port (default: %(default)s)")
    p.add_argument("--ingress-metrics-port", type=int, default=10254,
                   help="HAProxy's Prometheus exporter at /metrics, as ingress-nginx's port (default: "
                        "%(default)s; 0: off)")
    p.add_argument("--haproxy", default="haproxy", help="the HAProxy binary (default: %(default)s)")
    p.add_argument("--manage", action=argparse.BooleanOptionalAction, default=True,
                   help="also create the IngressClass and write Ingress/Gateway statuses and events "
                        "(default: on; turn it off on every node but one)")
    p.add_argument("--proxy", action=argparse.BooleanOptionalAction, default=True,
                   help="serve traffic through HAProxy (default: on; --no-proxy: statuses only)")
    p.add_argument("--node-name", default="", help="the node named in events (default: none)")


def config_from_args(args: argparse.Namespace):  # -> IngressConfig
    from nodeagent.client.config import Credentials
    from nodeagent.commands.configs import cli_errors
    from nodeagent.ingress.config import IngressConfig

    with cli_errors("ingress"):
        return IngressConfig(credentials=Credentials(kubeconfig=args.kubeconfig), work_dir=args.work_dir,
                             listen_address=args.listen_address, http_port=args.ingress_http_port,
                             https_port=args.ingress_https_port, metrics_port=args.ingress_metrics_port,
                             haproxy=args.haproxy, run_proxy=args.proxy,
                             manage=args.manage, node_name=args.node_name)


def run(args: argparse.Namespace) -> int:
    import asyncio
    import shutil
    import sys
    from pathlib import Path

    from nodeagent.runner import Component, run_components

    if not Path(args.kubeconfig).is_file():
        print(f"nodeagent ingress: no kubeconfig at {args.kubeconfig} (--kubeconfig)", file=sys.stderr)
        return 1
    if args.proxy and shutil.which(args.haproxy) is None:
        print(f"nodeagent ingress: {args.haproxy} not found (apt-get install haproxy, or --haproxy PATH)",
              file=sys.stderr)
        return 1
    cfg = config_from_args(args)
    return asyncio.run(run_components(
        [Component("ingress", "nodeagent.ingress.service:serve", "the traffic-in issue")], {"ingress": cfg}))
