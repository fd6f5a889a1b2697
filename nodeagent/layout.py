"""Where one nodeagent instance keeps things: every path, socket, port, bridge, chain and cgroup name of
a node, derived from its data dir in one place.

The default data dir (/var/lib/nodeagent) keeps the well-known locations a person and the standard tools
expect (/run/nodeagent/cri.sock, /etc/cni/net.d, bridge na0, the root cgroup's kubepods, apiserver 6443,
kubelet 10250). Any other data dir is a throwaway instance: its names carry the data dir's tag (six hex
digits of a hash of its resolved path) or live under the data dir, and its ports are any free ones, so
several instances run side by side on one host without sharing a socket, bridge, chain or cgroup.

Only the composition layer (`nodeagent/commands/`, the lab, tests) reads a `Layout`: it builds each
component's config from it (and from the flags, which override single names), and the components use the
concrete paths and names their config carries. That is why this module lives in `nodeagent/` and imports
nothing: `cri` and `cni` (which may import only the kernel layer) never see it, and no component
recomputes a name another one derived differently.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

DEFAULT_DATA_DIR = "/var/lib/nodeagent"
ETC_DIR = "/etc/nodeagent"  # config, static pods and the admin kubeconfig of the default instance
REGISTRIES = f"{ETC_DIR}/registries.yaml"  # the image store's mirrors and auth (k3s format)
RUN_DIR = "/run/nodeagent"  # the default instance's sockets
# The CNI conventions the reference tools use (containernetworking's defaults), for the default instance.
CNI_CONF_DIR = "/etc/cni/net.d"
CNI_IPAM_DIR = "/var/lib/cni/networks"
CSI_DRIVER = "hostpath.csi.nodeagent.io"  # the CSI driver `up` and `agent` run (csi.config.DRIVER_NAME)
# The kubelet's default --volume-plugin-dir (FlexVolume drivers), for the default instance.
FLEX_PLUGIN_DIR = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec"


def instance_tag(data_dir: str | Path) -> str:
    """A short stable tag for one data dir (six hex digits of a hash of its resolved path)."""
    return hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:6]


def is_default(data_dir: str | Path) -> bool:
    return Path(data_dir).resolve() == Path(DEFAULT_DATA_DIR).resolve()


@dataclasses.dataclass(frozen=True)
class Layout:
    """The names of one instance. Build it with `for_data_dir`; the fields are concrete values."""

    data_dir: str
    tag: str  # "" for the default data dir
    # the control plane (the apiserver's own files — pki/, tokens.csv, store.db, join-command — are
    # under data_dir: its state dir)
    admin_kubeconfig: str  # written by the apiserver, read by the control-plane parts and `up`'s node parts
    admin_kubeconfig_copy: str | None  # also written there (/etc/nodeagent/admin.kubeconfig, default only)
    node_kubeconfig: str  # a joined node's own credential
    scheduler_kubeconfig: str  # the scheduler's own credential (system:kube-scheduler), the apiserver writes
    controller_manager_kubeconfig: str  # the controller manager's (system:kube-controller-manager), likewise
    proxy_kubeconfig: str  # `up`'s netproxy's (system:kube-proxy), likewise
    dns_kubeconfig: str  # cluster DNS's (ServiceAccount kube-system/coredns), likewise
    netpol_kubeconfig: str  # `up`'s NetworkPolicy agent's (kube-system/nodeagent-netpol), likewise
    ingress_kubeconfig: str  # `up`'s ingress controller's (ingress-nginx/ingress-nginx), likewise
    snapshot_kubeconfig: str  # `up`'s CSI snapshotter's (kube-system/snapshot-controller), likewise
    apiserver_port: int  # 0: any free port
    # the apiserver's root-only Unix socket for the components in its own process (same handler chain)
    apiserver_socket: str
    # the runtime
    cri_socket: str
    cri_state_dir: str
    image_dir: str  # where `nodeagent image` and the runtime keep images
    # the pod network (nodenet's `cni` and `podcidr` components, the runtime's CNI calls)
    network_name: str  # the conflist's name, which names its masquerade chain and allocation dir
    bridge: str
    cni_conf_dir: str
    cni_ipam_dir: str
    cni_socket: str  # the CNI plugins' resident daemon (NODEAGENT_CNI_SOCKET)
    cluster_cidr: str  # `up`'s own node IPAM range
    bird_dir: str  # bgp mode: BIRD's config, control socket (bird.ctl), pid file and log
    # the kubelet
    cgroup_root: str  # the cgroup the kubepods tree goes under ("": the hierarchy's root)
    kubelet_root_dir: str  # volumes: <root>/pods/<uid>/volumes, serving cert: <root>/pki
    pod_log_dir: str  # <dir>/<ns>_<name>_<uid>/<container>/<n>.log
    manifests_dir: str  # static pods
    kubelet_port: int  # the Node API; 0: any free port
    local_path_dir: str  # the local-path provisioner's volumes: <dir>/pvc-<uid>_<ns>_<claim>
    # the CSI hostpath driver: its records and volumes, its socket, the kubelet's plugin watcher dir (the
    # kubelet's `<root>/plugins_registry`) and the driver's registration socket in it. A unix socket's path
    # has at most 107 bytes: a throwaway instance (whose data dir may be deep, a lab node's) keeps them
    # short, directly under the data dir.
    csi_state_dir: str
    csi_socket: str
    plugin_registry_dir: str
    csi_registration_socket: str
    volume_plugin_dir: str  # the kubelet's --volume-plugin-dir: FlexVolume drivers <vendor>~<driver>/<driver>
    # NetworkPolicy's kernel objects
    netpol_chain_prefix: str  # iptables mode: <prefix>-FORWARD, -INGRESS, -EGRESS, ...
    netpol_set_prefix: str  # iptables mode: ipset names
    netpol_table: str  # nftables mode: table ip <table>
    # the ingress proxy (HAProxy): its config, certificates and admin socket; its ports (0: any free one)
    ingress_dir: str
    ingress_http_port: int
    ingress_https_port: int
    ingress_metrics_port: int
    lb_metrics_port: int  # the LoadBalancer speaker's /metrics (0: any free one)

    @property
    def is_default(self) -> bool:
        return not self.tag

    @property
    def kube_context(self) -> str:
        """The cluster, user and context name merged into a person's kubeconfig (`~/.kube/config`)."""
        return "nodeagent" if not self.tag else f"nodeagent-{self.tag}"

    @property
    def throwaway(self) -> bool:
        """An instance that leaves nothing behind: its Service rules go when it stops, its cluster DNS
        answers on a port of its own (every data dir but the default)."""
        return bool(self.tag)

    @classmethod
    def default(cls) -> Layout:
        return cls.for_data_dir(DEFAULT_DATA_DIR)

    @classmethod
    def for_data_dir(cls, data_dir: str | Path = DEFAULT_DATA_DIR) -> Layout:
        d = str(data_dir)
        if is_default(d):
            return cls(
                data_dir=d, tag="",
                admin_kubeconfig=_in(d, "admin.kubeconfig"),
                admin_kubeconfig_copy=f"{ETC_DIR}/admin.kubeconfig",
                node_kubeconfig=_in(d, "kubelet.kubeconfig"), apiserver_port=6443,
                apiserver_socket=_in(d, "apiserver.sock"),
                scheduler_kubeconfig=_in(d, "scheduler.kubeconfig"),
            controller_manager_kubeconfig=_in(d, "controller-manager.kubeconfig"),
            proxy_kubeconfig=_in(d, "kube-proxy.kubeconfig"), dns_kubeconfig=_in(d, "coredns.kubeconfig"),
            netpol_kubeconfig=_in(d, "netpol.kubeconfig"), ingress_kubeconfig=_in(d, "ingress.kubeconfig"),
            snapshot_kubeconfig=_in(d, "snapshot-controller.kubeconfig"),
                cri_socket=f"{RUN_DIR}/cri.sock", cri_state_dir=_in(d, "cri"), image_dir=_in(d, "images"),
                network_name="nodeagent", bridge="na0", cni_conf_dir=CNI_CONF_DIR, cni_ipam_dir=CNI_IPAM_DIR,
                cni_socket=f"{RUN_DIR}/cni.sock", cluster_cidr="10.244.0.0/16", bird_dir=_in(d, "bird"),
                cgroup_root="",
                kubelet_root_dir=_in(d, "kubelet"), pod_log_dir=_in(d, "pod-logs"),
                manifests_dir=_in(d, "manifests"), kubelet_port=10250, local_path_dir=_in(d, "storage"),
                csi_state_dir=_in(d, "csi"), csi_socket=_in(d, "kubelet", "plugins", CSI_DRIVER, "csi.sock"),
                plugin_registry_dir=_in(d, "kubelet", "plugins_registry"),
                csi_registration_socket=_in(d, "kubelet", "plugins_registry", f"{CSI_DRIVER}-reg.sock"),
                volume_plugin_dir=FLEX_PLUGIN_DIR,
                netpol_chain_prefix="NODEAGENT-NP", netpol_set_prefix="NA-NP-",
                netpol_table="nodeagent-netpol",
                ingress_dir=_in(d, "ingress"), ingress_http_port=80, ingress_https_port=443,
                ingress_metrics_port=10254, lb_metrics_port=7472)
        tag = instance_tag(d)
        return cls(
            data_dir=d, tag=tag,
            admin_kubeconfig=_in(d, "admin.kubeconfig"), admin_kubeconfig_copy=None,
            node_kubeconfig=_in(d, "kubelet.kubeconfig"), apiserver_port=0,
            apiserver_socket=_in(d, "apiserver.sock"),
            scheduler_kubeconfig=_in(d, "scheduler.kubeconfig"),
            controller_manager_kubeconfig=_in(d, "controller-manager.kubeconfig"),
            proxy_kubeconfig=_in(d, "kube-proxy.kubeconfig"), dns_kubeconfig=_in(d, "coredns.kubeconfig"),
            netpol_kubeconfig=_in(d, "netpol.kubeconfig"), ingress_kubeconfig=_in(d, "ingress.kubeconfig"),
            snapshot_kubeconfig=_in(d, "snapshot-controller.kubeconfig"),
            cri_socket=_in(d, "cri.sock"), cri_state_dir=_in(d, "cri"), image_dir=_in(d, "images"),
            network_name=f"nodeagent-{tag}", bridge=f"na{tag}",  # 8 characters: within IFNAMSIZ
            cni_conf_dir=_in(d, "cni", "net.d"), cni_ipam_dir=_in(d, "cni", "networks"),
            cni_socket=_in(d, "cni-plugin.sock"),
            # a /24 of 10.240.0.0/16 named by the tag (as the bridge is): several one-node `up` clusters on
            # one host do not give two bridges the same subnet (`up --cluster-cidr` widens it)
            cluster_cidr=f"10.240.{int(tag[:2], 16)}.0/24", bird_dir=_in(d, "bird"),
            cgroup_root=f"nodeagent-{tag}", kubelet_root_dir=_in(d, "kubelet"),
            pod_log_dir=_in(d, "pod-logs"), manifests_dir=_in(d, "manifests"), kubelet_port=0,
            local_path_dir=_in(d, "storage"), csi_state_dir=_in(d, "csi"),
            csi_socket=_in(d, "csi.sock"), plugin_registry_dir=_in(d, "reg"),
            csi_registration_socket=_in(d, "reg", "csi.sock"),
            volume_plugin_dir=_in(d, "volume-plugins"), netpol_chain_prefix=f"NA{tag}-NP",
            netpol_set_prefix=f"NA{tag}-",
            netpol_table=f"nodeagent-netpol-{tag}", ingress_dir=_in(d, "ingress"), ingress_http_port=0,
            ingress_https_port=0, ingress_metrics_port=0, lb_metrics_port=0)


def _in(data_dir: str, *parts: str) -> str:
    return str(Path(data_dir, *parts))
