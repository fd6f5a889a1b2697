"""`nodeagent up`: the whole single-node cluster in the foreground.

Every path and name comes from --data-dir through `nodeagent.layout` (CRI socket, state, CNI
conflist/bridge/IPAM dir, cgroup root, volumes, logs), so several instances with different data dirs run
side by side; the default data dir keeps the well-known locations (/run/nodeagent/cri.sock,
/etc/cni/net.d, bridge na0, port 6443). `config_from_args` builds every component's config
(`commands.configs`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING

from nodeagent.commands.proxy import add_ipvs_arguments
from nodeagent.layout import DEFAULT_DATA_DIR, REGISTRIES, Layout
from nodeagent.runner import Component, run_components

if TYPE_CHECKING:
    from nodeagent.commands.configs import Configs
    from nodeagent.controllers.options import ControllerOptions

log = logging.getLogger("nodeagent.up")

# The parts of a single-node cluster, in start order, each after what it needs.
COMPONENTS = [
    Component("cni", "nodeagent.nodenet.cni_service:serve", "the kubelet issue"),
    Component("cri", "cri.service:serve", "the cri issue", after=("cni",)),
    Component("apiserver", "nodeagent.apiserver.service:serve", "the apiserver issue"),
    # the CNI config from the Node's spec.podCIDR, once the node IPAM assigned it (or --pod-subnet)
    Component("podcidr", "nodeagent.nodenet.podcidr_service:serve", "the multi-node issue",
              after=("cni", "apiserver")),
    Component("scheduler", "nodeagent.scheduler.service:serve", "the scheduler issue", after=("apiserver",)),
    Component("controllers", "nodeagent.controllers.service:serve", "the controllers issue",
              after=("apiserver",)),
    # the hostpath CSI driver, registered with the kubelet through its plugins_registry dir
    Component("csi", "csi.service:serve", "the storage issue"),
    Component("kubelet", "nodeagent.kubelet.service:serve", "the kubelet issue", after=("cri", "apiserver")),
    Component("netproxy", "netproxy.service:serve", "the netproxy issue", after=("apiserver",)),
    Component("netpol", "netpol.service:serve", "the dns/netpol issue", after=("apiserver",)),
    Component("dns", "nodeagent.dns.service:serve", "the dns issue", after=("apiserver",)),
    Component("podnetwork", "nodeagent.nodenet.podnetwork_service:serve", "the multi-node issue",
              after=("apiserver",)),
    Component("nodenet", "nodeagent.nodenet.nodenet_service:serve", "the multi-node issue",
              after=("apiserver",)),
    Component("ingress", "nodeagent.ingress.service:serve", "the traffic-in issue", after=("apiserver",)),
    Component("lbspeaker", "nodeagent.lbspeaker.service:serve", "the traffic-in issue", after=("apiserver",)),
]

# `nodeagent agent`: the node part alone, against a remote apiserver.
NODE_COMPONENTS = [
    Component("cni", "nodeagent.nodenet.cni_service:serve", "the kubelet issue"),
    Component("cri", "cri.service:serve", "the cri issue", after=("cni",)),
    Component("podcidr", "nodeagent.nodenet.podcidr_service:serve", "the multi-node issue", after=("cni",)),
    Component("csi", "csi.service:serve", "the storage issue"),
    Component("kubelet", "nodeagent.kubelet.service:serve", "the kubelet issue", after=("cri",)),
    Component("netproxy", "netproxy.service:serve", "the netproxy issue"),
    Component("netpol", "netpol.service:serve", "the dns/netpol issue"),
    Component("nodenet", "nodeagent.nodenet.nodenet_service:serve", "the multi-node issue"),
    Component("ingress", "nodeagent.ingress.service:serve", "the traffic-in issue"),
    Component("lbspeaker", "nodeagent.lbspeaker.service:serve", "the traffic-in issue"),
]


def add_node_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="state directory (default: %(default)s)")
    p.add_argument("--node-name", default=None, help="node name (default: the hostname)")
    p.add_argument("--container-runtime-endpoint", default=None,
                   help="CRI endpoint, e.g. unix:///run/containerd/containerd.sock (default: start ours)")
    p.add_argument("--cgroup-root", default=None,
                   help="cgroup the kubepods tree goes under (default: the root for the default data dir, "
                        "else nodeagent-<tag of the data dir>)")
    p.add_argument("--pod-subnet", default=None,
                   help="pod subnet on this node's bridge, overriding the node's spec.podCIDR "
                        "(default: adopt the spec.podCIDR the control plane's node IPAM assigns, as kubelet "
                        "with a CNI does)")
    p.add_argument("--node-ip", default=None,
                   help="the node's address: status.addresses InternalIP, the underlay address "
                        "other nodes route pods through, and where NodePorts answer (default: detected from "
                        "the default route / the route to the server)")
    p.add_argument("--bridge", default=None,
                   help="pod bridge name (default: na0, or na<tag> for other data dirs)")
    p.add_argument("--proxy-mode", default="iptables", choices=("iptables", "nftables", "ipvs"),
                   help="how netproxy programs Services, as kube-proxy's --proxy-mode (default: %(default)s)")
    p.add_argument("--proxy-rule-counters", action="store_true",
                   help="iptables mode: give every rule a packet counter, as iptables-nft does, for "
                        "`iptables -L -v`/`iptables-save -c` (off by default: each counter makes every rule "
                        "change's kernel validation slower)")
    add_ipvs_arguments(p)
    p.add_argument("--cni-bin-dir", action="append", default=None,
                   help="CNI plugin directory for our runtime, repeatable (default: /opt/cni/bin and "
                        "/usr/lib/cni)")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) YAML file for the "
                        "kubelet's eviction, reservation, garbage-collection, CPU-manager, pod-limit and "
                        "node-lease settings; flags given on the command line override it, as kubelet's "
                        "--config")
    p.add_argument("--eviction-hard", default=None,
                   help="hard eviction thresholds in kubelet syntax, e.g. "
                        "'memory.available<500Mi,nodefs.available<10%%' (default: the kubelet's; "
                        "'' for none)")
    p.add_argument("--eviction-soft", default=None,
                   help="soft eviction thresholds, e.g. 'memory.available<1Gi'; each needs "
                        "--eviction-soft-grace-period")
    p.add_argument("--eviction-soft-grace-period", default=None,
                   help="how long a soft threshold must hold before evicting, e.g. 'memory.available=1m30s'")
    p.add_argument("--eviction-minimum-reclaim", default=None,
                   help="how far past a threshold to reclaim before pressure ends, e.g. "
                        "'memory.available=0Mi,nodefs.available=500Mi'")
    p.add_argument("--eviction-max-pod-grace-period", type=int, default=None,
                   help="cap in seconds on a pod's grace period when a soft threshold evicts it "
                        "(default: 0, the pod's own)")
    p.add_argument("--eviction-pressure-transition-period", default=None,
                   help="how long a pressure condition stays after its signal clears (default: 5m0s)")
    p.add_argument("--system-reserved", default=None,
                   help="resources kept for the OS, taken off the Node's allocatable, e.g. "
                        "'cpu=200m,memory=500Mi,ephemeral-storage=1Gi,pid=1000'")
    p.add_argument("--kube-reserved", default=None,
                   help="resources kept for Kubernetes daemons, taken off allocatable (same syntax)")
    p.add_argument("--enforce-node-allocatable", default=None,
                   help="what node allocatable is enforced on, comma-separated: pods (the kubepods cgroup "
                        "limited to capacity minus the reservations), system-reserved, kube-reserved (their "
                        "cgroups limited to the reservation), or none (default: pods)")
    p.add_argument("--system-reserved-cgroup", default=None,
                   help="the cgroup of the OS daemons --system-reserved is enforced on, e.g. /system.slice")
    p.add_argument("--kube-reserved-cgroup", default=None,
                   help="the cgroup of the Kubernetes daemons --kube-reserved is enforced on")
    p.add_argument("--cpu-manager-policy", default=None, choices=("none", "static"),
                   help="static: Guaranteed pods with whole-CPU requests get exclusive CPUs "
                        "(default: none)")
    p.add_argument("--reserved-cpus", default=None,
                   help="CPUs kept for the system and Kubernetes daemons, e.g. '0' or '0-1,6' (replaces the "
                        "cpu of --system-reserved and --kube-reserved; the static policy never hands them "
                        "out)")
    p.add_argument("--cpu-manager-reconcile-period", default=None,
                   help="how often the CPU manager re-applies cpusets to running containers (default: "
                        "10s)")
    p.add_argument("--memory-manager-policy", default=None,
                   help="only None: nodeagent has no memory manager (another value is refused)")
    p.add_argument("--topology-manager-policy", default=None,
                   help="only none: nodeagent has no topology manager (another value is refused)")
    p.add_argument("--kube-api-qps", type=int, default=None,
                   help="the kubelet's API requests per second (kubelet's flag; >= 0, 0: client-go's "
                        "default 5; default 50)")
    p.add_argument("--kube-api-burst", type=int, default=None,
                   help="requests the kubelet may send at once above --kube-api-qps (>= 0, 0: 10; "
                        "default 100)")
    p.add_argument("--event-qps", type=int, default=None,
                   help="Events the kubelet creates per second (>= 0, 0: 5; default 50)")
    p.add_argument("--event-burst", type=int, default=None,
                   help="Events it may create at once above --event-qps (>= 0, 0: 10; default 100)")
    p.add_argument("--max-pods", type=int, default=None,
                   help="pods this node runs at most (default: 110)")
    p.add_argument("--max-parallel-pod-starts", type=int, default=None,
                   help="pods in the runtime part of their start (cgroups, sandbox, container create and "
                        "start) at once; a pod waiting on an image pull, a volume or a postStart hook holds "
                        "no slot (nodeagent's own flag; 0: no limit, as kubelet; default 0)")
    p.add_argument("--pods-per-core", type=int, default=None,
                   help="cap pods at this many per logical CPU, below --max-pods (default: 0, no cap)")
    p.add_argument("--image-gc-high-threshold", type=int, default=None,
                   help="image filesystem usage (percent) at which image GC runs (default: 85)")
    p.add_argument("--image-gc-low-threshold", type=int, default=None,
                   help="usage (percent) image GC frees down to (default: 80)")
    p.add_argument("--image-minimum-gc-age", default=None,
                   help="unused images younger than this are never collected (default: 2m0s)")
    p.add_argument("--maximum-dead-containers-per-container", type=int, default=None,
                   help="dead instances kept per container (deprecated in kubelet, still honoured; "
                        "default: 1; -1: no limit)")
    p.add_argument("--maximum-dead-containers", type=int, default=None,
                   help="dead containers kept on the node (deprecated in kubelet; default: -1, no limit)")
    p.add_argument("--minimum-container-ttl-duration", default=None,
                   help="dead containers younger than this are never collected (deprecated in kubelet; "
                        "default: 0s)")
    p.add_argument("--container-gc-period", default="1m0s",
                   help="how often dead containers are collected (kubelet: 1m; default: %(default)s)")
    p.add_argument("--image-gc-period", default="5m0s",
                   help="how often image GC runs (kubelet: 5m; default: %(default)s)")
    p.add_argument("--housekeeping-interval", type=float, default=None,
                   help="seconds between eviction passes (default: 10)")
    p.add_argument("--kubelet-port", type=int, default=None,
                   help="the kubelet's Node API HTTPS port (default: 10250 for the default data "
                        "dir, else any free one)")
    p.add_argument("--kubelet-address", default=None, help="the Node API's listen address (default: 0.0.0.0)")
    p.add_argument("--sync-frequency", type=float, default=None,
                   help="seconds between periodic syncs of a running pod (default: 60; runtime events and "
                        "probe changes sync at once)")
    p.add_argument("--manifest-url", default=None,
                   help="also run the static pods (a Pod or PodList) served at this URL")
    p.add_argument("--http-check-frequency", type=float, default=None,
                   help="seconds between fetches of --manifest-url (default: 20)")
    p.add_argument("--ingress", action=argparse.BooleanOptionalAction, default=True,
                   help="serve Ingresses and Gateway API routes on this node through HAProxy (default: on; "
                        "--no-ingress to leave the node's 80/443 alone)")
    p.add_argument("--ingress-http-port", type=int, default=None,
                   help="the ingress proxy's HTTP port (default: 80 for the default data dir, else any "
                        "free one)")
    p.add_argument("--ingress-https-port", type=int, default=None,
                   help="the ingress proxy's HTTPS port (default: 443 for the default data dir, else any "
                        "free one)")
    p.add_argument("--ingress-metrics-port", type=int, default=None,
                   help="the ingress proxy's Prometheus metrics port, /metrics (default: 10254 for the "
                        "default data dir, else any free one; 0: off)")
    p.add_argument("--lb-announce", default="l2", choices=("l2", "none"),
                   help="how this node announces LoadBalancer addresses: l2 answers ARP for the ones it "
                        "owns (one node per address, through a Lease; MetalLB's layer-2 mode), none leaves "
                        "it to another speaker, e.g. BGP (default: %(default)s)")
    p.add_argument("--lb-metrics-port", type=int, default=None,
                   help="the LoadBalancer speaker's Prometheus metrics port, /metrics, MetalLB's metric "
                        "names (default: 7472 for the default data dir, else any free one; 0: off)")
    p.add_argument("--lb-interface", default=None,
                   help="the interface ARP is answered on (default: the one holding --node-ip, else the "
                        "default route's)")
    p.add_argument("--registries", default=None, metavar="FILE",
                   help="the runtime's mirrors, rewrites, registry auth and TLS in k3s's registries.yaml "
                        f"format, re-read when it changes (default: {REGISTRIES} when it exists)")
    p.add_argument("--cluster-dns", default=None,
                   help="cluster DNS IPs written into ClusterFirst pods' resolv.conf, comma-separated "
                        "(default: the kube-dns Service IP of the server's default Service range, "
                        "10.96.0.10; '' for none)")
    p.add_argument("--allowed-unsafe-sysctls", default=None,
                   help="namespaced sysctls (or prefixes ending in *) pods may set beyond the kubelet's safe "
                        "ones, comma-separated, e.g. 'net.core.somaxconn,kernel.msg*'")
    p.add_argument("--volume-plugin-dir", default=None,
                   help="where FlexVolume drivers are found, <vendor>~<driver>/<driver> (default: "
                        "/usr/libexec/kubernetes/kubelet-plugins/volume/exec for the default data dir, "
                        "<data dir>/volume-plugins otherwise)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from nodeagent.commands import user_kubeconfig

    add_node_arguments(p)
    user_kubeconfig.add_arguments(p)
    p.add_argument("--port", type=int, default=None,
                   help="apiserver HTTPS port (default: 6443 for the default data dir, else any free one)")
    p.add_argument("--bind-address", default=None, help="apiserver listen address (default: 0.0.0.0)")
    p.add_argument("--scheduler-config", default=None, metavar="FILE",
                   help="the scheduler's KubeSchedulerConfiguration (profiles, plugin args, extenders), as "
                        "kube-scheduler's --config (default: the default profile)")
    from nodeagent.commands.configs import add_pod_network_arguments

    add_pod_network_arguments(p)
    p.add_argument("--cluster-cidr", default=None,
                   help="pod range the node IPAM hands node podCIDRs (/24 each) out of (default: "
                        "10.244.0.0/16 for the default data dir, else 10.240.<tag>.0/24, so instances on "
                        "one host do not collide; with --pod-subnet, that subnet)")
    from nodeagent.commands.configs import (
        add_autoscaling_arguments,
        add_inflight_arguments,
        add_service_lb_arguments,
    )

    add_inflight_arguments(p)
    add_autoscaling_arguments(p)
    add_service_lb_arguments(p)


def config_from_args(args: argparse.Namespace) -> Configs:
    """Every component's config for `up` (parsed with `add_arguments`): the node part with the admin
    credential its own apiserver writes, and the control plane with `up`'s own node IPAM range."""
    from nodeagent.apiserver.auth import NODES_GROUP
    from nodeagent.apiserver.authz.policy import NETPOL, SNAPSHOTS
    from nodeagent.apiserver.config import ApiServerConfig, ComponentCredential
    from nodeagent.client.config import Credentials
    from nodeagent.commands import user_kubeconfig
    from nodeagent.commands.configs import (
        DNS_LISTEN,
        Configs,
        bgp_settings,
        cli_errors,
        control_plane_configs,
        node_configs,
        service_account_credential,
        with_autoscaling,
        with_service_lb,
    )

    layout = Layout.for_data_dir(args.data_dir)
    options = with_service_lb(with_autoscaling(
        up_controller_options(args.data_dir, args.cluster_cidr, args.pod_subnet), args), args)
    # a throwaway instance serves cluster DNS on a port of its own (the kube-dns EndpointSlice carries it)
    dns_listen = f"0.0.0.0:{free_udp_tcp_port()}" if layout.throwaway else DNS_LISTEN
    with cli_errors("up"):
        api = ApiServerConfig(data_dir=args.data_dir, bind_address=args.bind_address or "0.0.0.0",
                              port=layout.apiserver_port if args.port is None else args.port,
                              admin_kubeconfig_copy=layout.admin_kubeconfig_copy,
                              user_kubeconfig=user_kubeconfig.target(args, layout),
                              metric_resolution=args.metric_resolution,
                              max_requests_inflight=args.max_requests_inflight,
                              max_mutating_requests_inflight=args.max_mutating_requests_inflight)
        # the node's parts as the node, system:node:<name> in system:nodes, as `agent`'s after its TLS
        # bootstrap: the Node authorizer and NodeRestriction limit them to this node's objects
        node = node_configs(args, layout, Credentials(kubeconfig=layout.node_kubeconfig))
        control = control_plane_configs(api, layout, controllers="*", options=options,
                                        pod_network=args.pod_network, dns_listen=dns_listen,
                                        scheduler_config=args.scheduler_config,
                                        bgp=bgp_settings(args, api.service_cluster_ip_range))
        # the kubelet's CSI snapshotter as the snapshot controller's account (a node may not write snapshots)
        snapshots = Credentials(kubeconfig=layout.snapshot_kubeconfig)
        node["kubelet"] = dataclasses.replace(node["kubelet"], snapshot_credentials=snapshots)
        node_user = ComponentCredential(layout.node_kubeconfig, f"system:node:{node['kubelet'].node_name}",
                                        (NODES_GROUP,))
        control["apiserver"] = dataclasses.replace(
            control["apiserver"], components=(
                *control["apiserver"].components, node_user,
                service_account_credential(layout.snapshot_kubeconfig, *SNAPSHOTS)))
        # netproxy as kube-proxy: user system:kube-proxy, authorized by system:node-proxier
        if node.get("netproxy") is not None:
            node["netproxy"] = dataclasses.replace(node["netproxy"],
                                                   credentials=Credentials(kubeconfig=layout.proxy_kubeconfig))
            proxy_user = ComponentCredential(layout.proxy_kubeconfig, "system:kube-proxy")
            control["apiserver"] = dataclasses.replace(
                control["apiserver"], components=(*control["apiserver"].components, proxy_user))
        # netpol as kube-router's ServiceAccount (reads policies, pods, namespaces)
        if node.get("netpol") is not None:
            node["netpol"] = dataclasses.replace(node["netpol"],
                                                 credentials=Credentials(kubeconfig=layout.netpol_kubeconfig))
            control["apiserver"] = dataclasses.replace(control["apiserver"], components=(
                *control["apiserver"].components,
                service_account_credential(layout.netpol_kubeconfig, *NETPOL)))
        # one ingress component does both: this node's proxy and the cluster-wide duties, as ingress-nginx's
        # ServiceAccount (its credential is the control plane's ingress one)
        proxy = node.pop("ingress")
        if proxy is not None:
            control["ingress"] = dataclasses.replace(proxy, manage=True,
                                                     credentials=control["ingress"].credentials)
        return Configs(layout=layout, **node, **control)


def up_controller_options(data_dir: str, cluster_cidr: str | None,
                          pod_subnet: str | None) -> ControllerOptions:
    """`up`'s controller settings: its node IPAM range (`Layout.cluster_cidr`); with --pod-subnet and no
    --cluster-cidr, exactly that subnet, so the Node's spec.podCIDR is the subnet the bridge uses."""
    import ipaddress

    from nodeagent.controllers.options import ControllerOptions

    try:
        net = ipaddress.ip_network(cluster_cidr or pod_subnet or Layout.for_data_dir(data_dir).cluster_cidr,
                                   strict=False)
        mask = (ipaddress.ip_network(pod_subnet, strict=False).prefixlen if pod_subnet
                else max(24, net.prefixlen))
    except ValueError as e:
        raise SystemExit(f"--cluster-cidr/--pod-subnet: {e}") from None
    return ControllerOptions(cluster_cidr=str(net), node_cidr_mask_size=mask)


def free_udp_tcp_port() -> int:
    """A port free for both UDP and TCP on every address (DNS answers on both)."""
    import socket

    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.bind(("0.0.0.0", 0))
            port = u.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
                try:
                    t.bind(("0.0.0.0", port))
                except OSError:
                    continue
                return port
    raise RuntimeError("no port is free for both UDP and TCP")


def no_grpc_fork_handlers() -> None:
    """The runtime forks container processes from this process, which also holds gRPC channels; gRPC's
    fork handlers would try to restart its threads in those children (inside new pid namespaces, where
    that fails): turn them off before grpc is first imported."""
    import os

    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")


def run(args: argparse.Namespace) -> int:
    from kernel.memory import lean_process
    from kernel.probe import probe_host

    lean_process()
    no_grpc_fork_handlers()
    report = probe_host()
    log.info("host: kernel %s, cgroups %s", report.kernel, report.cgroups.summary)
    configs = config_from_args(args)
    return asyncio.run(run_components(configs.components(COMPONENTS), configs.by_component()))
