"""Flags → component configs: the one place `up`, `agent` and `server` turn their flags and the instance's
`Layout` into each component's own frozen config (KubeletConfig, CRIConfig, ProxyConfig, ...).

Every value is decided and validated here, once: a bad flag is a CLI error naming it, before anything
starts; the components then use what their config says and derive nothing themselves.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from cri.config import DEFAULT_CNI_BIN_DIRS, CRIConfig
from csi.config import CSIConfig
from netpol.config import MODES as NETPOL_MODES
from netpol.config import NetpolConfig
from netproxy.config import ProxyConfig
from nodeagent.api.kube_dns import DNSAddon
from nodeagent.apiserver.authz.policy import COREDNS, INGRESS
from nodeagent.apiserver.config import ApiServerConfig, ComponentCredential
from nodeagent.client.config import Credentials
from nodeagent.controllers.config import ControllerManagerConfig
from nodeagent.controllers.options import ControllerOptions
from nodeagent.ingress.config import IngressConfig
from nodeagent.kubelet.config import KubeletConfig, parse_cluster_dns
from nodeagent.layout import REGISTRIES, Layout
from nodeagent.lbspeaker.config import SpeakerConfig
from nodeagent.nodenet.birdconf import DEFAULT_AS
from nodeagent.nodenet.config import BGPSettings, CNIConfig, NodeNetConfig, PodCIDRConfig, PodNetworkConfig
from nodeagent.nodenet.network import PodNetwork
from nodeagent.runner import Component
from nodeagent.scheduler.config import SchedulerServiceConfig

if TYPE_CHECKING:  # imported where made: its validation loads dnspython, which a joined `agent` never needs
    from nodeagent.dns.config import DNSConfig

DNS_LISTEN = "0.0.0.0:53"


@dataclasses.dataclass(frozen=True)
class Configs:
    """The config of each component a command runs (None: not run by it)."""

    layout: Layout
    cni: CNIConfig | None = None
    cri: CRIConfig | None = None
    external_runtime: str | None = None  # --container-runtime-endpoint: the kubelet's runtime is not ours
    apiserver: ApiServerConfig | None = None
    podcidr: PodCIDRConfig | None = None
    scheduler: SchedulerServiceConfig | None = None
    controllers: ControllerManagerConfig | None = None
    kubelet: KubeletConfig | None = None
    netproxy: ProxyConfig | None = None
    netpol: NetpolConfig | None = None
    dns: DNSConfig | None = None
    podnetwork: PodNetworkConfig | None = None
    nodenet: NodeNetConfig | None = None
    ingress: IngressConfig | None = None
    lbspeaker: SpeakerConfig | None = None
    csi: CSIConfig | None = None

    def by_component(self) -> dict[str, Any]:
        """{component name: its config}, what `runner.run_components` hands each `serve`."""
        out = {f.name: self.__dict__[f.name] for f in dataclasses.fields(self)
               if f.name not in ("layout", "external_runtime") and self.__dict__[f.name] is not None}
        if self.external_runtime:
            out["cri"] = self.external_runtime
        return out

    def components(self, table: list[Component]) -> list[Component]:
        """The command's component table, with the `cri` component standing in for an external runtime; a
        component its flags turned off (no config, e.g. --lb-announce none) is left out."""
        configured = self.by_component()
        table = [c for c in table if c.name in configured]
        if not self.external_runtime:
            return table
        return [dataclasses.replace(c, target=f"{__name__}:external_runtime") if c.name == "cri" else c
                for c in table]


async def external_runtime(endpoint: str, ready: asyncio.Event) -> None:
    """The `cri` component when the kubelet uses another runtime (`--container-runtime-endpoint`)."""
    logging.getLogger("nodeagent.cri").info("using the external runtime at %s; not starting ours", endpoint)
    ready.set()
    await asyncio.Event().wait()


@contextlib.contextmanager
def cli_errors(command: str) -> Iterator[None]:
    """A config that does not validate ends the command with its message (as a bad --node-ip does)."""
    try:
        yield
    except ValueError as e:
        raise SystemExit(f"nodeagent {command}: {e}") from None


# -- the node part (`up`, `agent`) -------------------------------------------------------------------------


def node_ip_from(value: str | None) -> str | None:
    """--node-ip, normalized; not an address: a CLI error."""
    if not value:
        return None
    import ipaddress

    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise SystemExit(f"--node-ip {value!r}: not an IP address") from None


def registries_file(flag: str | None) -> str | None:
    """--registries (else /etc/nodeagent/registries.yaml when it exists), read now: a file that does not
    parse stops the command at start with its path and line, not at the first pull."""
    import os

    from cri.images.registries import RegistriesConfig, RegistriesConfigError

    path = os.path.abspath(flag) if flag else (REGISTRIES if os.path.exists(REGISTRIES) else None)
    if path is None:
        return None
    try:
        RegistriesConfig.load(path)
    except (OSError, RegistriesConfigError) as e:
        raise ValueError(f"--registries {path}: {e}") from None
    return path


def default_cluster_dns() -> str:
    """The kube-dns ClusterIP the server's DNS registers in its default Service range (10.96.0.10)."""
    from nodeagent.api.kube_dns import default_service_ip

    return default_service_ip(ApiServerConfig.service_cluster_ip_range)


# flag dest → how its text becomes the KubeletConfig field of the same name ("str", "int", "duration",
# "pairs", "list"); only flags given on the command line count, so they override --config as kubelet's do
KUBELET_FLAGS = {
    "eviction_hard": "str", "eviction_soft": "str", "eviction_soft_grace_period": "str",
    "eviction_minimum_reclaim": "str", "eviction_max_pod_grace_period": "int",
    "eviction_pressure_transition_period": "duration", "system_reserved": "pairs", "kube_reserved": "pairs",
    "enforce_node_allocatable": "list", "system_reserved_cgroup": "str", "kube_reserved_cgroup": "str",
    "cpu_manager_policy": "str", "reserved_cpus": "str", "cpu_manager_reconcile_period": "duration",
    "memory_manager_policy": "str", "topology_manager_policy": "str", "max_pods": "int",
    "pods_per_core": "int", "kube_api_qps": "int", "kube_api_burst": "int", "event_qps": "int",
    "event_burst": "int", "max_parallel_pod_starts": "int",
    "image_gc_high_threshold": "int", "image_gc_low_threshold": "int", "image_minimum_gc_age": "duration",
    "maximum_dead_containers_per_container": "int", "maximum_dead_containers": "int",
    "minimum_container_ttl_duration": "duration", "container_gc_period": "duration",
    "image_gc_period": "duration",
}


def kubelet_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The kubelet's eviction, reservation, GC and CPU-manager settings as KubeletConfig fields: the --config
    file's, overridden by the flags given; a malformed one ends the command with kubelet's message."""
    from nodeagent.kubelet.config_file import ConfigFileError, read
    from nodeagent.kubelet.eviction.thresholds import ThresholdError, parse_duration, parse_map

    out: dict[str, Any] = {}
    if getattr(args, "config", None):
        try:
            out.update(read(args.config))
        except ConfigFileError as e:
            raise SystemExit(str(e)) from None
    for dest, kind in KUBELET_FLAGS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        flag = "--" + dest.replace("_", "-")
        try:
            if kind == "duration":
                value = parse_duration(value)
            elif kind == "pairs":
                value = tuple(parse_map(value, "=").items())
            elif kind == "list":
                value = tuple(x.strip() for x in value.split(",") if x.strip())
        except ThresholdError as e:
            raise SystemExit(f'invalid argument "{value}" for "{flag}" flag: {e}') from None
        out[dest] = value
    return out


def node_configs(args: argparse.Namespace, layout: Layout, credentials: Credentials) -> dict[str, Any]:
    """The node's components (cni, cri, podcidr, kubelet, netproxy, netpol, nodenet) from the flags of
    `add_node_arguments` (see `nodeagent.commands.up`)."""
    node_name = (args.node_name or socket.gethostname()).lower()
    node_ip = node_ip_from(args.node_ip)
    network = PodNetwork(name=layout.network_name, bridge=args.bridge or layout.bridge,
                         subnet=args.pod_subnet or None, conf_dir=layout.cni_conf_dir,
                         ipam_dir=layout.cni_ipam_dir, daemon_socket=layout.cni_socket)
    cgroup_root = layout.cgroup_root if args.cgroup_root is None else args.cgroup_root
    external = args.container_runtime_endpoint or None
    cri = None if external else CRIConfig(
        socket=layout.cri_socket, state_dir=layout.cri_state_dir, image_dir=layout.image_dir,
        cni_conf_dir=network.conf_dir, cni_bin_dirs=tuple(args.cni_bin_dir or DEFAULT_CNI_BIN_DIRS),
        cni_socket=network.daemon_socket, registries=registries_file(args.registries))
    settings = kubelet_settings(args)
    if args.cluster_dns is not None or "cluster_dns" not in settings:
        settings["cluster_dns"] = parse_cluster_dns(default_cluster_dns() if args.cluster_dns is None
                                                    else args.cluster_dns)
    if args.http_check_frequency is not None:
        settings["http_check_frequency"] = float(args.http_check_frequency)
    if args.sync_frequency is not None:
        settings["resync"] = float(args.sync_frequency)
    if args.manifest_url:
        settings["manifest_url"] = args.manifest_url
    if args.allowed_unsafe_sysctls:
        settings["allowed_unsafe_sysctls"] = tuple(x.strip() for x in args.allowed_unsafe_sysctls.split(",")
                                                   if x.strip())
    kubelet = KubeletConfig(
        data_dir=layout.data_dir, node_name=node_name, runtime_endpoint=external or layout.cri_socket,
        credentials=credentials, root_dir=layout.kubelet_root_dir, log_dir=layout.pod_log_dir,
        manifests_dir=layout.manifests_dir, cgroup_root=cgroup_root,
        housekeeping_interval=float(args.housekeeping_interval or 10.0),
        port=layout.kubelet_port if args.kubelet_port is None else args.kubelet_port,
        address=args.kubelet_address or "0.0.0.0", node_ip=node_ip or "",
        local_path_dir=layout.local_path_dir, plugin_registry_dir=layout.plugin_registry_dir,
        volume_plugin_dir=args.volume_plugin_dir or layout.volume_plugin_dir, shared_pod_cache=True,
        **settings)
    netproxy = ProxyConfig(
        mode=args.proxy_mode, node_name=node_name, node_ips=(node_ip,) if node_ip else (),
        rule_counters=args.proxy_rule_counters, ipvs_scheduler=args.ipvs_scheduler,
        # the L2 speaker needs strict ARP in ipvs mode (MetalLB's documented requirement): every
        # LoadBalancer address sits on kube-ipvs0 of every node, which would otherwise all answer ARP for it
        ipvs_strict_arp=args.ipvs_strict_arp or (args.proxy_mode == "ipvs" and args.lb_announce == "l2"),
        cleanup_on_stop=layout.throwaway, credentials=credentials)
    netpol = NetpolConfig(
        chain_prefix=layout.netpol_chain_prefix, set_prefix=layout.netpol_set_prefix,
        table=layout.netpol_table, mode=args.proxy_mode if args.proxy_mode in NETPOL_MODES else "iptables",
        node_name=node_name, credentials=credentials)
    ingress = IngressConfig(
        credentials=credentials, work_dir=layout.ingress_dir, node_name=node_name,
        http_port=args.ingress_http_port or layout.ingress_http_port or free_tcp_port(),
        https_port=args.ingress_https_port or layout.ingress_https_port or free_tcp_port(),
        metrics_port=args.ingress_metrics_port if args.ingress_metrics_port is not None else
        layout.ingress_metrics_port or free_tcp_port()) \
        if args.ingress else None
    lbspeaker = SpeakerConfig(
        credentials=credentials, node_name=node_name, node_ip=node_ip, interface=args.lb_interface or None,
        metrics_port=args.lb_metrics_port if args.lb_metrics_port is not None else
        layout.lb_metrics_port or free_tcp_port()) if args.lb_announce == "l2" else None
    csi = CSIConfig(node_id=node_name, state_dir=layout.csi_state_dir, socket=layout.csi_socket,
                    registration_socket=layout.csi_registration_socket)
    return {"cni": CNIConfig(network, cgroup_root), "cri": cri, "external_runtime": external, "csi": csi,
            "podcidr": PodCIDRConfig(network, node_name, credentials), "kubelet": kubelet,
            "netproxy": netproxy, "netpol": netpol,
            "nodenet": NodeNetConfig(node_name, credentials, node_ip=node_ip, pod_subnet=network.subnet,
                                     bird_dir=layout.bird_dir),
            "ingress": ingress, "lbspeaker": lbspeaker}


def free_tcp_port() -> int:
    """A TCP port free on every address now (a throwaway instance's ingress ports)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


# -- the control plane (`up`, `server`) --------------------------------------------------------------------


def dns_config(api: ApiServerConfig, kubeconfig: str, listen: str = DNS_LISTEN, **kw: Any) -> DNSConfig:
    """Cluster DNS as a part of the server: its kube-dns endpoint is its advertise address (else the listen
    address, or the default route's when listening on every one), and an address in use retried instead
    of stopping the control plane. It only reads: the kube-dns Service and slice are `dns_addon`'s."""
    from nodeagent.apiserver.server import advertise_ip
    from nodeagent.dns.config import DNSConfig
    from nodeagent.dns.server import split_hostport

    kw.setdefault("retry_bind", True)
    advertise = api.advertise_address or advertise_ip(split_hostport(listen)[0])
    return DNSConfig(kubeconfig=kubeconfig, listen=listen,
                     service_cluster_ip_range=api.service_cluster_ip_range, advertise_address=advertise, **kw)


def dns_addon(dns: DNSConfig) -> DNSAddon:
    """The kube-dns Service and EndpointSlice the apiserver's bootstrap writes for `dns`, as kubeadm's addon
    phase installs CoreDNS's (the DNS server itself may only read)."""
    from nodeagent.api.kube_dns import default_service_ip
    from nodeagent.dns.server import split_hostport

    host, port = split_hostport(dns.listen)
    return DNSAddon(dns.service_ip or default_service_ip(dns.service_cluster_ip_range),
                    dns.advertise_address or host, port)


def service_account_credential(path: str, namespace: str, name: str) -> ComponentCredential:
    """An embedded add-on's kubeconfig naming its ServiceAccount (user and groups as its token would give),
    authorized by the roles bound to that account."""
    from nodeagent.api.sa_names import groups, username

    return ComponentCredential(path, username(namespace, name), tuple(groups(namespace)))


def add_pod_network_arguments(p: argparse.ArgumentParser) -> None:
    """--pod-network and the bgp mode's settings (`server`, `up`)."""
    from nodeagent.nodenet.annotations import MODES

    p.add_argument("--pod-network", default="host-gw", choices=MODES,
                   help="cross-node pod network backend, carried to every node on its Node object; bgp runs "
                        "BIRD on every node as Calico does (default: %(default)s)")
    g = p.add_argument_group("bgp pod network (--pod-network bgp)")
    g.add_argument("--bgp-as", type=int, default=None, metavar="ASN",
                   help="the cluster's AS number, every node's local AS (default: 64512)")
    g.add_argument("--bgp-route-reflectors", default=None, metavar="NODE[,NODE]",
                   help="nodes that act as route reflectors: every other node peers with them only, instead "
                        "of the node-to-node full mesh")
    g.add_argument("--bgp-advertise-service-cluster-ips", action="store_true",
                   help="announce the Service ClusterIP range (--service-cluster-ip-range) to external BGP "
                        "peers (BGPPeer objects), as Calico's serviceClusterIPs")


def bgp_settings(args: argparse.Namespace, service_range: str) -> BGPSettings | None:
    """The bgp flags as the cluster's BGPSettings (None when none is given and the mode is not bgp; a bgp
    flag with another mode is refused by PodNetworkConfig)."""
    given = args.bgp_as is not None or args.bgp_route_reflectors is not None \
        or args.bgp_advertise_service_cluster_ips
    if args.pod_network != "bgp" and not given:
        return None
    reflectors = tuple(n.strip() for n in (args.bgp_route_reflectors or "").split(",") if n.strip())
    if args.bgp_route_reflectors is not None and not reflectors:
        raise ValueError("--bgp-route-reflectors: name at least one node")
    return BGPSettings(asn=DEFAULT_AS if args.bgp_as is None else args.bgp_as, route_reflectors=reflectors,
                       service_cidrs=(service_range,) if args.bgp_advertise_service_cluster_ips else ())


def control_plane_configs(api: ApiServerConfig, layout: Layout, *, controllers: str,
                          options: ControllerOptions, pod_network: str,
                          dns_listen: str = DNS_LISTEN,
                          scheduler_config: str | None = None,
                          bgp: BGPSettings | None = None) -> dict[str, Any]:
    """The parts beside the apiserver (scheduler, controllers, dns, podnetwork), each with the admin
    kubeconfig the apiserver writes. A scheduler configuration file is read now, so a bad one ends the
    command with its reason before anything starts."""
    kubeconfig = layout.admin_kubeconfig
    if scheduler_config is not None:
        import os

        import yaml

        from nodeagent.scheduler.profile import load_config

        scheduler_config = os.path.abspath(scheduler_config)
        try:
            load_config(scheduler_config)
        except (OSError, ValueError, yaml.YAMLError) as e:
            raise ValueError(f"--scheduler-config {scheduler_config}: {e}") from None
    # not as admin: the scheduler as system:kube-scheduler (the bootstrap roles system:kube-scheduler and
    # system:volume-scheduler), the controller manager as system:kube-controller-manager (its informers;
    # each controller writes as its own ServiceAccount)
    # CoreDNS as its ServiceAccount (system:coredns may only read: the installer, this apiserver's
    # bootstrap, writes the kube-dns Service and slice), the ingress controller as ingress-nginx's
    dns = dns_config(api, layout.dns_kubeconfig, dns_listen)
    # the components reach the apiserver through its root-only local socket (their kubeconfigs name it beside
    # the HTTPS URL), and those in its own process through its in-process entry registered under that
    # socket's path: the same handlers and credentials, without TLS and TCP (and HTTP framing)
    api = dataclasses.replace(api, dns_addon=dns_addon(dns), local_socket=layout.apiserver_socket,
                              components=api.components + (
        ComponentCredential(layout.scheduler_kubeconfig, "system:kube-scheduler"),
        ComponentCredential(layout.controller_manager_kubeconfig, "system:kube-controller-manager"),
        service_account_credential(layout.dns_kubeconfig, *COREDNS),
        service_account_credential(layout.ingress_kubeconfig, *INGRESS)))
    scheduler = SchedulerServiceConfig(layout.scheduler_kubeconfig, scheduler_config)
    return {"apiserver": api, "scheduler": scheduler,
            "controllers": ControllerManagerConfig(layout.controller_manager_kubeconfig, controllers,
                                                   options),
            "dns": dns,
            "podnetwork": PodNetworkConfig(kubeconfig, pod_network, options.cluster_cidr, bgp),
            # the Ingress/Gateway API duties of the control plane; every node's `ingress` serves traffic
            "ingress": IngressConfig(Credentials(kubeconfig=layout.ingress_kubeconfig),
                                     work_dir=layout.ingress_dir, run_proxy=False, manage=True)}


# -- metrics and autoscaling (`up`, `server`) ---------------------------------------------------------------

def duration_seconds(value: str) -> float:
    """A Go duration flag ("15s", "5m0s", "1h30m", "500ms") or plain seconds, as seconds."""
    from nodeagent.api.times import parse_duration

    try:
        return float(value)
    except ValueError:
        pass
    try:
        return parse_duration(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid duration {value!r} (e.g. 15s, 5m0s, 1h)") from None


def add_inflight_arguments(p: argparse.ArgumentParser) -> None:
    """kube-apiserver's max-in-flight flags: past them a request is answered 429 with Retry-After: 1."""
    g = p.add_argument_group("apiserver load")
    g.add_argument("--max-requests-inflight", type=int, default=400,
                   help="read-only requests (get, list) served at once; more are answered 429 "
                        "TooManyRequests with Retry-After: 1 (watches and exec/attach/log/port-forward/proxy "
                        "are exempt, system:masters always served; 0: no limit) (default: %(default)s)")
    g.add_argument("--max-mutating-requests-inflight", type=int, default=200,
                   help="mutating requests (create, update, patch, delete) served at once, as above "
                        "(default: %(default)s)")


def add_autoscaling_arguments(p: argparse.ArgumentParser) -> None:
    """metrics-server's --metric-resolution and kube-controller-manager's HPA flags."""
    g = p.add_argument_group("metrics and autoscaling")
    g.add_argument("--metric-resolution", type=duration_seconds, default=15.0,
                   help="how often every kubelet's /metrics/resource is scraped for metrics.k8s.io "
                        "(kubectl top, the HPA) (default: 15s)")
    g.add_argument("--horizontal-pod-autoscaler-sync-period", type=duration_seconds, default=15.0,
                   help="how often each HorizontalPodAutoscaler is reconciled (default: 15s)")
    g.add_argument("--horizontal-pod-autoscaler-downscale-stabilization", type=duration_seconds,
                   default=300.0,
                   help="how far back scale-down recommendations are looked at; the highest wins "
                        "(default: 5m0s)")
    g.add_argument("--horizontal-pod-autoscaler-tolerance", type=float, default=0.1,
                   help="the usage-to-target ratio must differ from 1.0 by more than this to scale "
                        "(default: %(default)s)")
    g.add_argument("--horizontal-pod-autoscaler-cpu-initialization-period", type=duration_seconds,
                   default=300.0,
                   help="after a pod starts, CPU samples are only used once it is ready and a window has "
                        "passed since (default: 5m0s)")
    g.add_argument("--horizontal-pod-autoscaler-initial-readiness-delay", type=duration_seconds,
                   default=30.0,
                   help="after a pod starts, readiness changes count as its first readiness "
                        "(default: 30s)")


def add_service_lb_arguments(p: argparse.ArgumentParser) -> None:
    """The LoadBalancer service controller's address pool (the control plane's part of LoadBalancer
    Services; every node's speaker announces what it allocates)."""
    p.add_argument("--service-lb-pool", default="", metavar="CIDR[,CIDR]",
                   help="addresses LoadBalancer Services get their status.loadBalancer.ingress IP from "
                        "(CIDRs or FIRST-LAST ranges; default: none, so they stay <pending> with an event, "
                        "as kube-controller-manager without a cloud; `nodeagent lab` gives one of its "
                        "node network)")


def with_service_lb(options: ControllerOptions, args: argparse.Namespace) -> ControllerOptions:
    from nodeagent.api.service_lb import parse_pool

    try:
        parse_pool(args.service_lb_pool)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    return dataclasses.replace(options, service_lb_pool=args.service_lb_pool)


def with_autoscaling(options: ControllerOptions, args: argparse.Namespace) -> ControllerOptions:
    """`options` with what the autoscaling flags set."""
    if args.horizontal_pod_autoscaler_sync_period <= 0:
        raise SystemExit("--horizontal-pod-autoscaler-sync-period: must be positive")
    if args.horizontal_pod_autoscaler_tolerance < 0:
        raise SystemExit("--horizontal-pod-autoscaler-tolerance: must not be negative")
    return dataclasses.replace(
        options, hpa_sync_period=args.horizontal_pod_autoscaler_sync_period,
        hpa_downscale_stabilization=args.horizontal_pod_autoscaler_downscale_stabilization,
        hpa_tolerance=args.horizontal_pod_autoscaler_tolerance,
        hpa_cpu_initialization_period=args.horizontal_pod_autoscaler_cpu_initialization_period,
        hpa_initial_readiness_delay=args.horizontal_pod_autoscaler_initial_readiness_delay)
