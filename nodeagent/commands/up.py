"""`nodeagent up`: the whole single-node cluster in the foreground.

Every path and name comes from --data-dir (CRI socket, state, CNI conflist/bridge/IPAM dir, cgroup root,
volumes, logs), so several instances with different data dirs run side by side; the default data dir
keeps the well-known locations (/run/nodeagent/cri.sock, /etc/cni/net.d, bridge na0, port 6443).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
from typing import Any

from nodeagent.commands.proxy import add_ipvs_arguments
from nodeagent.runner import Component, run_components

log = logging.getLogger("nodeagent.up")

DEFAULT_DATA_DIR = "/var/lib/nodeagent"

# The parts of a single-node cluster, in start order, each after what it needs.
COMPONENTS = [
    Component("cni", "nodeagent.kubelet.network:serve", "the kubelet issue"),
    Component("cri", "cri.daemon:serve", "the cri issue", after=("cni",)),
    Component("apiserver", "nodeagent.apiserver.server:serve", "the apiserver issue"),
    # the CNI config from the Node's spec.podCIDR, once the node IPAM assigned it (or --pod-subnet)
    Component("podcidr", "nodeagent.kubelet.network:adopt", "the multi-node issue", after=("cni", "apiserver")),
    Component("scheduler", "nodeagent.scheduler.service:serve", "the scheduler issue", after=("apiserver",)),
    Component("controllers", "nodeagent.controllers.manager:serve", "the controllers issue", after=("apiserver",)),
    Component("kubelet", "nodeagent.kubelet.agent:serve", "the kubelet issue", after=("cri", "apiserver")),
    Component("netproxy", "netproxy.service:serve", "the netproxy issue", after=("apiserver",)),
    Component("netpol", "netpol.service:serve", "the dns/netpol issue", after=("apiserver",)),
    Component("dns", "nodeagent.dns.service:serve", "the dns issue", after=("apiserver",)),
    Component("podnetwork", "nodeagent.nodenet.controller:serve", "the multi-node issue", after=("apiserver",)),
    Component("nodenet", "nodeagent.nodenet.agent:serve", "the multi-node issue", after=("apiserver",)),
]

# `nodeagent agent`: the node part alone, against a remote apiserver.
NODE_COMPONENTS = [
    Component("cni", "nodeagent.kubelet.network:serve", "the kubelet issue"),
    Component("cri", "cri.daemon:serve", "the cri issue", after=("cni",)),
    Component("podcidr", "nodeagent.kubelet.network:adopt", "the multi-node issue", after=("cni",)),
    Component("kubelet", "nodeagent.kubelet.agent:serve", "the kubelet issue", after=("cri",)),
    Component("netproxy", "netproxy.service:serve", "the netproxy issue"),
    Component("netpol", "netpol.service:serve", "the dns/netpol issue"),
    Component("nodenet", "nodeagent.nodenet.agent:serve", "the multi-node issue"),
]


@dataclasses.dataclass
class UpConfig:
    data_dir: str
    node_name: str | None
    container_runtime_endpoint: str | None
    apiserver_port: int | None = None
    apiserver_bind_address: str | None = None
    cgroup_root: str | None = None
    pod_subnet: str | None = None  # --pod-subnet: overrides the Node's spec.podCIDR
    node_ip: str | None = None  # --node-ip: InternalIP, nodenet's underlay address
    node_ips: tuple[str, ...] = ()  # netproxy's NodePort addresses: (node_ip,) with --node-ip, else every one
    bridge: str | None = None
    cni_conf_dir: str | None = None
    cni_socket: str | None = None  # our CNI plugins' daemon (started by the cni component, used by the runtime)
    cni_bin_dirs: tuple[str, ...] | None = None  # where the runtime finds CNI plugins (default: the runtime's)
    eviction_hard: str | None = None
    housekeeping_interval: float | None = None
    sync_frequency: float | None = None
    kubelet_port: int | None = None
    kubelet_address: str | None = None
    server: str | None = None  # `nodeagent agent`
    token: str | None = None
    cluster_dns: str | None = None  # kubelet --cluster-dns (comma-separated); '' for none
    node_kubeconfig: str | None = None  # `nodeagent agent`: the node's own credential, written by the join
    # Throwaway instances (any data dir but the default) remove their Service rules on stop, and serve
    # cluster DNS on a port of their own (the kube-dns EndpointSlice carries it), so several coexist.
    proxy_cleanup_on_stop: bool = False
    proxy_mode: str = "iptables"
    proxy_rule_counters: bool = False
    ipvs_scheduler: str = "rr"
    ipvs_strict_arp: bool = False
    dns_listen: str | None = None
    manifest_url: str | None = None
    http_check_frequency: float | None = None
    pod_network: str | None = None  # `up`: the cross-node backend its podnetwork component stamps on Nodes
    controller_options: Any = None  # `up`: its controller manager's (node IPAM: the cluster CIDR)


def add_node_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="state directory (default: %(default)s)")
    p.add_argument("--node-name", default=None, help="node name (default: the hostname)")
    p.add_argument("--container-runtime-endpoint", default=None,
                   help="CRI endpoint, e.g. unix:///run/containerd/containerd.sock (default: start ours)")
    p.add_argument("--cgroup-root", default=None,
                   help="cgroup the kubepods tree goes under (default: the root for the default data dir, "
                        "else nodeagent-<tag of the data dir>)")
    p.add_argument("--pod-subnet", default=None,
                   help="pod subnet on this node's bridge, overriding the node's spec.podCIDR (default: adopt the "
                        "spec.podCIDR the control plane's node IPAM assigns, as kubelet with a CNI does)")
    p.add_argument("--node-ip", default=None,
                   help="the node's address: status.addresses InternalIP, the underlay address other nodes route "
                        "pods through, and where NodePorts answer (default: detected from the default route / the "
                        "route to the server)")
    p.add_argument("--bridge", default=None, help="pod bridge name (default: na0, or na<tag> for other data dirs)")
    p.add_argument("--proxy-mode", default="iptables", choices=("iptables", "nftables", "ipvs"),
                   help="how netproxy programs Services, as kube-proxy's --proxy-mode (default: %(default)s)")
    p.add_argument("--proxy-rule-counters", action="store_true",
                   help="iptables mode: give every rule a packet counter, as iptables-nft does, for `iptables -L "
                        "-v`/`iptables-save -c` (off by default: each counter makes every rule change's kernel "
                        "validation slower)")
    add_ipvs_arguments(p)
    p.add_argument("--cni-bin-dir", action="append", default=None,
                   help="CNI plugin directory for our runtime, repeatable (default: /opt/cni/bin and /usr/lib/cni)")
    p.add_argument("--eviction-hard", default=None,
                   help="hard eviction thresholds in kubelet syntax, e.g. 'memory.available<500Mi,nodefs.available<10%%' "
                        "(default: the kubelet's; '' for none)")
    p.add_argument("--housekeeping-interval", type=float, default=None,
                   help="seconds between eviction passes (default: 10)")
    p.add_argument("--kubelet-port", type=int, default=None,
                   help="the kubelet's Node API HTTPS port (default: 10250 for the default data dir, else any "
                        "free one)")
    p.add_argument("--kubelet-address", default=None, help="the Node API's listen address (default: 0.0.0.0)")
    p.add_argument("--sync-frequency", type=float, default=None,
                   help="seconds between periodic syncs of a running pod (default: 60; runtime events and "
                        "probe changes sync at once)")
    p.add_argument("--manifest-url", default=None,
                   help="also run the static pods (a Pod or PodList) served at this URL")
    p.add_argument("--http-check-frequency", type=float, default=None,
                   help="seconds between fetches of --manifest-url (default: 20)")
    p.add_argument("--cluster-dns", default=None,
                   help="cluster DNS IPs written into ClusterFirst pods' resolv.conf, comma-separated (default: the "
                        "kube-dns Service IP of the server's default Service range, 10.96.0.10; '' for none)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_node_arguments(p)
    p.add_argument("--port", type=int, default=None,
                   help="apiserver HTTPS port (default: 6443 for the default data dir, else any free one)")
    p.add_argument("--bind-address", default=None, help="apiserver listen address (default: 0.0.0.0)")
    p.add_argument("--pod-network", default="host-gw", choices=("host-gw", "ipip", "vxlan"),
                   help="cross-node pod network backend (default: %(default)s)")
    p.add_argument("--cluster-cidr", default=None,
                   help="pod range the node IPAM hands node podCIDRs (/24 each) out of (default: 10.244.0.0/16 "
                        "for the default data dir, else 10.240.<tag>.0/24, so instances on one host do not "
                        "collide; with --pod-subnet, that subnet)")


def config_from_args(args: argparse.Namespace) -> UpConfig:
    from nodeagent.kubelet.network import PodNetwork

    default = args.data_dir == DEFAULT_DATA_DIR
    port = getattr(args, "port", None)
    cfg = UpConfig(args.data_dir, args.node_name, args.container_runtime_endpoint,
                   apiserver_port=port if port is not None else (6443 if default else 0),
                   apiserver_bind_address=getattr(args, "bind_address", None),
                   cgroup_root=args.cgroup_root, pod_subnet=args.pod_subnet, bridge=args.bridge,
                   eviction_hard=getattr(args, "eviction_hard", None),
                   housekeeping_interval=getattr(args, "housekeeping_interval", None),
                   sync_frequency=getattr(args, "sync_frequency", None),
                   kubelet_port=getattr(args, "kubelet_port", None),
                   kubelet_address=getattr(args, "kubelet_address", None),
                   server=getattr(args, "server", None), token=getattr(args, "token", None),
                   pod_network=getattr(args, "pod_network", None))
    cfg.proxy_mode = getattr(args, "proxy_mode", None) or "iptables"
    cfg.proxy_rule_counters = bool(getattr(args, "proxy_rule_counters", False))
    cfg.ipvs_scheduler = getattr(args, "ipvs_scheduler", None) or "rr"
    cfg.ipvs_strict_arp = bool(getattr(args, "ipvs_strict_arp", False))
    node_ip = getattr(args, "node_ip", None)
    if node_ip:
        import ipaddress

        try:
            cfg.node_ip = str(ipaddress.ip_address(node_ip))
        except ValueError:
            raise SystemExit(f"--node-ip {node_ip!r}: not an IP address") from None
        cfg.node_ips = (cfg.node_ip,)
    if hasattr(args, "port"):  # `up`: it runs its own node IPAM
        cfg.controller_options = up_controller_options(args.data_dir, getattr(args, "cluster_cidr", None),
                                                       args.pod_subnet)
    if getattr(args, "cni_bin_dir", None):
        cfg.cni_bin_dirs = tuple(args.cni_bin_dir)
    net = PodNetwork.from_any(cfg)
    cfg.cni_conf_dir = net.conf_dir
    cfg.cni_socket = net.daemon_socket
    cfg.manifest_url = getattr(args, "manifest_url", None)
    cfg.http_check_frequency = getattr(args, "http_check_frequency", None)
    dns = getattr(args, "cluster_dns", None)
    cfg.cluster_dns = default_cluster_dns() if dns is None else dns
    if not default:
        cfg.proxy_cleanup_on_stop = True
        cfg.dns_listen = f"0.0.0.0:{free_udp_tcp_port()}"
    return cfg


def up_controller_options(data_dir: str, cluster_cidr: str | None, pod_subnet: str | None) -> Any:
    """`up`'s controller settings: its node IPAM range (see network.default_cluster_cidr); with --pod-subnet
    and no --cluster-cidr, exactly that subnet, so the Node's spec.podCIDR is the subnet the bridge uses."""
    import ipaddress

    from nodeagent.controllers.options import ControllerOptions
    from nodeagent.kubelet.network import default_cluster_cidr

    try:
        net = ipaddress.ip_network(cluster_cidr or pod_subnet or default_cluster_cidr(data_dir), strict=False)
        mask = ipaddress.ip_network(pod_subnet, strict=False).prefixlen if pod_subnet else max(24, net.prefixlen)
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


def default_cluster_dns() -> str:
    """The kube-dns ClusterIP the server's DNS registers in its default Service range (10.96.0.10)."""
    from nodeagent.apiserver.server import ServerConfig
    from nodeagent.dns.register import default_service_ip

    return default_service_ip(ServerConfig().service_cluster_ip_range)


def no_grpc_fork_handlers() -> None:
    """The runtime forks container processes from this process, which also holds gRPC channels; gRPC's
    fork handlers would try to restart its threads in those children (inside new pid namespaces, where
    that fails): turn them off before grpc is first imported."""
    import os

    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")


def run(args: argparse.Namespace) -> int:
    from nodeagent.host.memory import lean_process
    from nodeagent.host.probe import probe_host

    lean_process()
    no_grpc_fork_handlers()
    report = probe_host()
    log.info("host: kernel %s, cgroups %s", report.kernel, report.cgroups.summary)
    return asyncio.run(run_components(COMPONENTS, config_from_args(args)))
