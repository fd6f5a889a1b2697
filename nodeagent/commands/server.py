"""`nodeagent server`: the control plane's apiserver alone, in the foreground."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from nodeagent.layout import DEFAULT_DATA_DIR

if TYPE_CHECKING:
    from nodeagent.commands.configs import Configs

# The components `server` runs beside the apiserver; each can be left out with --without.
OPTIONAL = {
    "scheduler": ("nodeagent.scheduler.service:serve", "the scheduler issue"),
    "controllers": ("nodeagent.controllers.service:serve", "the controllers issue"),
    "dns": ("nodeagent.dns.service:serve", "the DNS issue"),
    "podnetwork": ("nodeagent.nodenet.podnetwork_service:serve", "the multi-node issue"),
    # the IngressClass, Ingress and Gateway API statuses and events (every node's agent runs the proxy)
    "ingress": ("nodeagent.ingress.service:serve", "the traffic-in issue"),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from nodeagent.commands import user_kubeconfig

    user_kubeconfig.add_arguments(p)
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="state directory (default: %(default)s)")
    p.add_argument("--bind-address", default="0.0.0.0", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=6443,
                   help="HTTPS port (default: %(default)s; 0 picks a free one)")
    p.add_argument("--datastore", default="sqlite",
                   help="sqlite, memory, or etcd://HOST:PORT (default: %(default)s)")
    p.add_argument("--service-cluster-ip-range", default="10.96.0.0/12",
                   help="CIDR Service ClusterIPs come from (default: %(default)s)")
    p.add_argument("--without", action="append", default=[], choices=sorted(OPTIONAL),
                   help="do not run this control-plane component (repeatable), e.g. to run your own")
    p.add_argument("--lease-duration", type=int, default=15,
                   help="seconds an apiserver's identity lease lasts; the `kubernetes` endpoints "
                        "drop a server that stops renewing it (default: %(default)s)")
    p.add_argument("--token-ttl", type=float, default=24 * 3600.0,
                   help="seconds the printed join token stays valid (default: %(default)s; 0: never expires)")
    p.add_argument("--service-account-issuer", default="https://kubernetes.default.svc.cluster.local",
                   help="the `iss` of ServiceAccount tokens, served at /.well-known/openid-configuration "
                        "(default: %(default)s)")
    p.add_argument("--api-audiences", default="",
                   help="comma-separated audiences a ServiceAccount token must carry to authenticate "
                        "here (default: the issuer)")
    p.add_argument("--advertise-address", default=None,
                   help="IP other nodes reach this server on (default: the bind address, or the "
                        "default route's)")
    from nodeagent.commands.configs import add_pod_network_arguments

    add_pod_network_arguments(p)
    p.add_argument("--scheduler-config", default=None, metavar="FILE",
                   help="the scheduler's KubeSchedulerConfiguration (profiles, plugin args, extenders), as "
                        "kube-scheduler's --config (default: the default profile)")
    c = p.add_argument_group("controllers")
    c.add_argument("--controllers", default="*",
                   help="controllers to run: '*' all, 'name' adds, '-name' removes, 'none' (default: "
                        "%(default)s)")
    c.add_argument("--allocate-node-cidrs", action=argparse.BooleanOptionalAction, default=True,
                   help="give every node a spec.podCIDR out of --cluster-cidr, which agents adopt "
                        "for their pod network (default: on; --no-allocate-node-cidrs when something else "
                        "assigns them)")
    c.add_argument("--cluster-cidr", default="10.244.0.0/16", help="pod range node podCIDRs come from")
    c.add_argument("--node-cidr-mask-size", type=int, default=24, help="size of each node's podCIDR")
    c.add_argument("--node-monitor-period", type=float, default=5.0,
                   help="seconds between node health checks")
    c.add_argument("--node-monitor-grace-period", type=float, default=40.0,
                   help="seconds without heartbeat before a node is Unknown (default: %(default)s)")
    c.add_argument("--node-eviction-rate", type=float, default=0.1, help="nodes/s tainted in a healthy zone")
    c.add_argument("--secondary-node-eviction-rate", type=float, default=0.01,
                   help="nodes/s tainted in a partially disrupted large zone")
    c.add_argument("--unhealthy-zone-threshold", type=float, default=0.55,
                   help="not-ready share of a disrupted zone")
    c.add_argument("--large-cluster-size-threshold", type=int, default=50,
                   help="nodes in a zone to count as large")
    c.add_argument("--terminated-pod-gc-threshold", type=int, default=12500,
                   help="terminated pods kept before PodGC deletes the oldest (0: never)")
    from nodeagent.commands.configs import (
        add_autoscaling_arguments,
        add_inflight_arguments,
        add_service_lb_arguments,
    )

    add_inflight_arguments(p)
    add_autoscaling_arguments(p)
    add_service_lb_arguments(p)


def config_from_args(args: argparse.Namespace) -> Configs:
    from nodeagent.apiserver.config import ApiServerConfig
    from nodeagent.commands import user_kubeconfig
    from nodeagent.commands.configs import (
        Configs,
        bgp_settings,
        cli_errors,
        control_plane_configs,
        with_autoscaling,
        with_service_lb,
    )
    from nodeagent.controllers.options import ControllerOptions
    from nodeagent.layout import Layout

    layout = Layout.for_data_dir(args.data_dir)
    with cli_errors("server"):
        api = ApiServerConfig(data_dir=args.data_dir, bind_address=args.bind_address, port=args.port,
                              datastore=args.datastore,
                              service_cluster_ip_range=args.service_cluster_ip_range,
                              advertise_address=args.advertise_address, lease_duration=args.lease_duration,
                              token_ttl=args.token_ttl, admin_kubeconfig_copy=layout.admin_kubeconfig_copy,
                              service_account_issuer=args.service_account_issuer,
                              api_audiences=tuple(a for a in args.api_audiences.split(",") if a),
                              user_kubeconfig=user_kubeconfig.target(args, layout),
                              metric_resolution=args.metric_resolution,
                              max_requests_inflight=args.max_requests_inflight,
                              max_mutating_requests_inflight=args.max_mutating_requests_inflight)
        options = with_autoscaling(ControllerOptions(
            allocate_node_cidrs=args.allocate_node_cidrs, cluster_cidr=args.cluster_cidr,
            node_cidr_mask_size=args.node_cidr_mask_size,
            node_monitor_period=args.node_monitor_period,
            node_monitor_grace_period=args.node_monitor_grace_period,
            node_eviction_rate=args.node_eviction_rate,
            secondary_node_eviction_rate=args.secondary_node_eviction_rate,
            unhealthy_zone_threshold=args.unhealthy_zone_threshold,
            large_cluster_size_threshold=args.large_cluster_size_threshold,
            terminated_pod_gc_threshold=args.terminated_pod_gc_threshold), args)
        options = with_service_lb(options, args)
        configs = control_plane_configs(api, layout, controllers=args.controllers, options=options,
                                        pod_network=args.pod_network, scheduler_config=args.scheduler_config,
                                        bgp=bgp_settings(args, args.service_cluster_ip_range))
    return Configs(layout=layout, **{k: v for k, v in configs.items() if k not in args.without})


def run(args: argparse.Namespace) -> int:
    import asyncio

    from kernel.memory import lean_process
    from nodeagent.runner import Component, run_components

    lean_process()
    configs = config_from_args(args)
    from nodeagent.apiserver import service

    del service  # imported to fail early if the apiserver cannot load
    components = [Component("apiserver", "nodeagent.apiserver.service:serve", "the apiserver issue")]
    components += [Component(name, target, issue, after=("apiserver",))
                   for name, (target, issue) in OPTIONAL.items() if name not in args.without]
    return asyncio.run(run_components(components, configs.by_component()))
