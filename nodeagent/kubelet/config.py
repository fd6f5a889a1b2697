"""The kubelet component's configuration (KubeletConfiguration's part that nodeagent has), validated when
it is built (`nodeagent up` / `agent` build it from their flags and the instance's `Layout`)."""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from nodeagent.api.quantity import QuantityError, parse_quantity
from nodeagent.client.config import Credentials
from nodeagent.client.ratelimit import TokenBucket
from nodeagent.client.rest import Client
from nodeagent.kubelet.eviction.thresholds import DEFAULT_HARD, Threshold, ThresholdError, parse_thresholds
from nodeagent.kubelet.gc.containers import ContainerGCPolicy
from nodeagent.kubelet.gc.images import ImageGCPolicy

RESERVABLE = ("cpu", "memory", "ephemeral-storage", "pid")  # kubelet's parseResourceList


def parse_reserved(m: Mapping[str, str]) -> dict[str, Fraction]:
    """--system-reserved / --kube-reserved as kubelet's parseResourceList takes them (its messages)."""
    out: dict[str, Fraction] = {}
    for k, v in m.items():
        if k not in RESERVABLE:
            raise ValueError(f"cannot reserve {k!r} resource")
        try:
            q = parse_quantity(v)
        except QuantityError as e:
            raise ValueError(f"failed to parse quantity {v!r} for {k!r} resource: {e}") from None
        if q < 0:
            raise ValueError(f"resource quantity for {k!r} cannot be negative: {v}")
        out[k] = q
    return out


def parse_cluster_dns(value: Any) -> tuple[str, ...]:
    """`--cluster-dns` as the kubelet takes it: comma-separated IPs (or a list); None/'' for none."""
    if not value:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    return tuple(str(i).strip() for i in items if str(i).strip())


@dataclasses.dataclass(frozen=True)
class KubeletConfig:
    data_dir: str  # the node's state dir (nodefs stats; `up`'s cluster CA in pki/)
    node_name: str
    runtime_endpoint: str  # the CRI socket (a path or unix:// URL)
    credentials: Credentials
    root_dir: str  # volumes: <root_dir>/pods/<uid>/volumes, serving cert: <root_dir>/pki
    log_dir: str  # container logs: <log_dir>/<ns>_<name>_<uid>/<container>/<n>.log
    manifests_dir: str  # static pods
    cgroup_root: str = ""  # the cgroup kubepods goes under; "": the hierarchy's root
    # the CSI snapshot sidecar's own account (the snapshot controller's and external-snapshotter's work,
    # which NodeRestriction does not give a node); None: the kubelet's credential
    snapshot_credentials: Credentials | None = None
    manifest_url: str = ""  # static pods from a URL (--manifest-url)
    http_check_frequency: float = 20.0
    kube_api_qps: float = 50.0  # --kube-api-qps (kubelet's default since 1.27)
    kube_api_burst: int = 100  # --kube-api-burst
    event_qps: float = 50.0  # --event-qps
    event_burst: int = 100  # --event-burst
    eviction_hard: str | None = None  # kubelet flag syntax; None: the kubelet's defaults
    eviction_soft: str = ""  # --eviction-soft, e.g. "memory.available<1Gi"
    eviction_soft_grace_period: str = ""  # --eviction-soft-grace-period, e.g. "memory.available=1m30s"
    eviction_minimum_reclaim: str = ""  # --eviction-minimum-reclaim, e.g. "memory.available=100Mi"
    eviction_max_pod_grace_period: int = 0  # caps a soft eviction's pod grace period; <= 0: the pod's own
    eviction_pressure_transition_period: float = 300.0  # seconds a pressure condition outlasts its signal
    system_reserved: tuple[tuple[str, str], ...] = ()  # --system-reserved: (resource, quantity) pairs
    kube_reserved: tuple[tuple[str, str], ...] = ()  # --kube-reserved
    enforce_node_allocatable: tuple[str, ...] = ("pods",)  # --enforce-node-allocatable
    system_reserved_cgroup: str = ""  # --system-reserved-cgroup: limited to --system-reserved when enforced
    kube_reserved_cgroup: str = ""  # --kube-reserved-cgroup: limited to --kube-reserved when enforced
    housekeeping_interval: float = 10.0
    resync: float = 60.0  # kubelet's --sync-frequency: every pod is re-synced at least this often
    port: int = 10250  # the Node API (HTTPS); 0: any free port
    address: str = "0.0.0.0"
    cluster_dns: tuple[str, ...] = ()  # kubelet's --cluster-dns; empty: ClusterFirst pods get the host's DNS
    cluster_domain: str = "cluster.local"
    resolv_conf: str = "/etc/resolv.conf"
    node_ip: str = ""  # kubelet's --node-ip: the InternalIP it reports; empty: detected
    allowed_unsafe_sysctls: tuple[str, ...] = ()  # --allowed-unsafe-sysctls: names or prefixes ending in *
    # where CSI drivers' registration sockets appear ("": <root_dir>/plugins_registry, the kubelet's own)
    plugin_registry_dir: str = ""
    local_path_dir: str = ""  # the node's local-path provisioner keeps its volumes here; "": no provisioner
    cpu_manager_policy: str = "none"  # --cpu-manager-policy: none or static
    reserved_cpus: str = ""  # --reserved-cpus: a CPU list kept off pods (replaces the reserved cpu amounts)
    cpu_manager_reconcile_period: float = 10.0  # --cpu-manager-reconcile-period, seconds
    memory_manager_policy: str = "None"  # --memory-manager-policy: only None (no memory manager here)
    topology_manager_policy: str = "none"  # --topology-manager-policy: only none (no topology manager here)
    max_pods: int = 110  # --max-pods
    node_lease_duration: int = 40  # nodeLeaseDurationSeconds: the node Lease's; renewed every quarter of it
    # --max-parallel-pod-starts: pods in the runtime part of their start at once (0: no limit)
    max_parallel_pod_starts: int = 0
    image_gc_high_threshold: int = 85  # --image-gc-high-threshold, percent of the image filesystem
    image_gc_low_threshold: int = 80  # --image-gc-low-threshold
    image_minimum_gc_age: float = 120.0  # --image-minimum-gc-age, seconds
    image_maximum_gc_age: float = 0.0  # imageMaximumGCAge, seconds; 0: off
    maximum_dead_containers_per_container: int = 1  # --maximum-dead-containers-per-container; < 0: no limit
    maximum_dead_containers: int = -1  # --maximum-dead-containers; < 0: no limit
    minimum_container_ttl_duration: float = 0.0  # --minimum-container-ttl-duration, seconds
    container_gc_period: float = 60.0  # kubelet's ContainerGCPeriod
    image_gc_period: float = 300.0  # kubelet's ImageGCPeriod
    pods_per_core: int = 0  # --pods-per-core: caps pods at this many per logical CPU; 0: no cap
    volume_plugin_dir: str = ""  # --volume-plugin-dir: FlexVolume drivers; "": flexVolume volumes refused
    # read its pods from the process's cache of every pod (up/agent: netpol keeps one with the same
    # credentials) instead of a watch of its own with spec.nodeName=<node> (one copy of each pod, not two)
    shared_pod_cache: bool = False

    def __post_init__(self) -> None:
        for name in ("data_dir", "node_name", "runtime_endpoint", "root_dir", "log_dir", "manifests_dir"):
            if not getattr(self, name):
                raise ValueError(f"kubelet: {name} is empty")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"kubelet port {self.port}: not a TCP port (0 picks a free one)")
        for name in ("http_check_frequency", "housekeeping_interval", "resync"):
            if getattr(self, name) <= 0:
                raise ValueError(f"kubelet {name} {getattr(self, name)}: must be positive")
        for ip in (*self.cluster_dns, *([self.node_ip] if self.node_ip else [])):
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                raise ValueError(f"kubelet: {ip!r} is not an IP address") from None
        from nodeagent.kubelet.admission import check_sysctl_pattern

        for pattern in self.allowed_unsafe_sysctls:
            check_sysctl_pattern(pattern)
        try:
            self.thresholds()
        except ThresholdError as e:
            raise ValueError(f"kubelet eviction thresholds: {e}") from None
        if self.node_lease_duration <= 0:
            raise ValueError("invalid configuration: nodeLeaseDurationSeconds must be greater than 0")
        if self.eviction_pressure_transition_period < 0:
            raise ValueError("kubelet eviction-pressure-transition-period "
                             f"{self.eviction_pressure_transition_period}: must not be negative")
        for name in ("system_reserved", "kube_reserved"):
            parse_reserved(dict(getattr(self, name)))
        self._check_cpu_settings()
        self._check_enforcement()
        self.image_gc_policy()
        if self.container_gc_period <= 0 or self.image_gc_period <= 0:
            raise ValueError("the garbage collection periods must be positive")
        if self.minimum_container_ttl_duration < 0:
            raise ValueError("--minimum-container-ttl-duration must not be negative")

    def image_gc_policy(self) -> ImageGCPolicy:
        """The image GC policy; a bad combination is refused with kubelet's message."""
        return ImageGCPolicy(self.image_gc_high_threshold, self.image_gc_low_threshold,
                             self.image_minimum_gc_age, self.image_maximum_gc_age)

    def container_gc_policy(self) -> ContainerGCPolicy:
        return ContainerGCPolicy(self.minimum_container_ttl_duration,
                                 self.maximum_dead_containers_per_container, self.maximum_dead_containers)

    def _check_enforcement(self) -> None:
        """kubelet's validation of enforceNodeAllocatable and the reserved cgroups (its messages)."""
        opts = self.enforce_node_allocatable
        valid = ("pods", "system-reserved", "kube-reserved", "none")
        for o in opts:
            if o not in valid:
                raise ValueError(f'invalid configuration: option "{o}" specified for enforceNodeAllocatable '
                                 '(--enforce-node-allocatable). Valid options are "pods", "system-reserved", '
                                 '"kube-reserved", or "none"')
        if "none" in opts and len(opts) > 1:
            raise ValueError("invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) "
                             'may not contain additional enforcements when "none" is specified '
                             f'({",".join(opts)})')
        for what, cgroup in (("system", self.system_reserved_cgroup), ("kube", self.kube_reserved_cgroup)):
            if f"{what}-reserved" in opts and not cgroup:
                raise ValueError(f"invalid configuration: {what}ReservedCgroup (--{what}-reserved-cgroup) "
                                 f'must be specified when "{what}-reserved" contained in '
                                 "enforceNodeAllocatable (--enforce-node-allocatable)")
            if cgroup and not cgroup.startswith("/"):
                raise ValueError(f"--{what}-reserved-cgroup {cgroup!r}: must be an absolute cgroup path")

    def _check_cpu_settings(self) -> None:
        from nodeagent.kubelet.cpumanager.cpuset import CPUSetError, parse
        from nodeagent.kubelet.cpumanager.manager import POLICIES

        if self.cpu_manager_policy not in POLICIES:
            raise ValueError(f'--cpu-manager-policy: unknown policy: "{self.cpu_manager_policy}" '
                             f"(one of {', '.join(POLICIES)})")
        try:
            parse(self.reserved_cpus)
        except CPUSetError as e:
            raise ValueError(f'--reserved-cpus "{self.reserved_cpus}": {e}') from None
        if self.cpu_manager_reconcile_period <= 0:
            raise ValueError("--cpu-manager-reconcile-period must be positive")
        if self.memory_manager_policy != "None":
            raise ValueError(f'--memory-manager-policy "{self.memory_manager_policy}": nodeagent has no '
                             'memory manager; only "None" is accepted')
        if self.topology_manager_policy != "none":
            raise ValueError(f'--topology-manager-policy "{self.topology_manager_policy}": nodeagent has no '
                             'topology manager; only "none" is accepted')
        for flag, value in (("kubeAPIQPS (--kube-api-qps)", self.kube_api_qps),
                            ("kubeAPIBurst (--kube-api-burst)", self.kube_api_burst),
                            ("eventRecordQPS (--event-qps)", self.event_qps),
                            ("eventBurst (--event-burst)", self.event_burst)):
            if value < 0:  # kubelet's ValidateKubeletConfiguration messages
                raise ValueError(f"invalid configuration: {flag} {value:g} must not be a negative number")
        if self.max_pods <= 0:
            raise ValueError(f"--max-pods {self.max_pods}: must be positive")
        if self.pods_per_core < 0:
            raise ValueError(f"--pods-per-core {self.pods_per_core}: must not be negative")
        if self.max_parallel_pod_starts < 0:
            raise ValueError(f"--max-parallel-pod-starts {self.max_parallel_pod_starts}: must not be "
                             "negative (0: no limit)")

    def reserved_cpu_set(self) -> frozenset[int]:
        from nodeagent.kubelet.cpumanager.cpuset import parse

        return parse(self.reserved_cpus)

    def pod_capacity(self, cpus: int) -> int:
        """The Node's pods capacity: --max-pods, capped at --pods-per-core × CPUs when that is set."""
        if self.pods_per_core > 0:
            return min(self.max_pods, self.pods_per_core * cpus)
        return self.max_pods

    def thresholds(self) -> list[Threshold]:
        """The hard and soft eviction thresholds, as kubelet's ParseThresholdConfig builds them."""
        return parse_thresholds(self.eviction_hard if self.eviction_hard is not None else DEFAULT_HARD,
                                self.eviction_soft, self.eviction_soft_grace_period,
                                self.eviction_minimum_reclaim)

    def reserved(self) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
        """(system-reserved, kube-reserved) as resource lists; --reserved-cpus replaces their cpu amounts
        with its CPU count (kubelet: it overrides the cpu of --system-reserved and --kube-reserved)."""
        system, kube = parse_reserved(dict(self.system_reserved)), parse_reserved(dict(self.kube_reserved))
        cpus = self.reserved_cpu_set()
        if cpus:
            system["cpu"] = Fraction(len(cpus))
            kube.pop("cpu", None)
        return system, kube

    def client(self) -> Client:
        """The kubelet's API client, limited to --kube-api-qps with --kube-api-burst."""
        return self.credentials.client(TokenBucket(self.kube_api_qps, self.kube_api_burst))

    def snapshot_client(self) -> Client | None:
        """The CSI snapshotter's client, under its own account when it has one."""
        if self.snapshot_credentials is None:
            return None
        return self.snapshot_credentials.client(TokenBucket(self.kube_api_qps, self.kube_api_burst))

    def event_client(self) -> Client:
        """The client its Events go through, with their own limit (kubelet's eventClient: --event-qps,
        --event-burst), so a burst of Events never delays a status update."""
        return self.credentials.client(TokenBucket(self.event_qps, self.event_burst))
