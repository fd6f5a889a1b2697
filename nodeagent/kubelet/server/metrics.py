"""The kubelet's Prometheus metrics (names and buckets as pkg/kubelet/metrics defines them).

One registry per kubelet (several agents may share a process in tests). The sync loop, PLEG and pod
workers record into it; gauges for running pods/containers are computed when scraped.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

from nodeagent.api import features

# kubelet's buckets for pod start and PLEG relist (metrics.go)
POD_START_BUCKETS = (0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900,
                     1200, 1800, 2700, 3600)
PLEG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class _Running:
    """kubelet_running_pods and kubelet_running_containers{container_state}, read at scrape time."""

    def __init__(self, snapshot: Callable[[], tuple[int, dict[str, int]]]) -> None:
        self.snapshot = snapshot

    def collect(self):
        pods, states = self.snapshot()
        g = GaugeMetricFamily("kubelet_running_pods", "Number of pods that have a running pod sandbox")
        g.add_metric([], pods)
        yield g
        c = GaugeMetricFamily("kubelet_running_containers", "Number of containers currently running",
                              labels=["container_state"])
        for state in ("running", "exited", "created", "unknown"):
            c.add_metric([state], states.get(state, 0))
        yield c


# kubelet_volume_stats_* (pkg/kubelet/metrics/collectors/volume_stats.go): stats key → (name, help)
VOLUME_STATS = (
    ("capacityBytes", "kubelet_volume_stats_capacity_bytes", "Capacity in bytes of the volume"),
    ("availableBytes", "kubelet_volume_stats_available_bytes", "Number of available bytes in the volume"),
    ("usedBytes", "kubelet_volume_stats_used_bytes", "Number of used bytes in the volume"),
    ("inodes", "kubelet_volume_stats_inodes", "Maximum number of inodes in the volume"),
    ("inodesFree", "kubelet_volume_stats_inodes_free", "Number of free inodes in the volume"),
    ("inodesUsed", "kubelet_volume_stats_inodes_used", "Number of used inodes in the volume"),
)

# (namespace, claim, stats) of every mounted claim's volume on the node
ClaimStats = Callable[[], list[tuple[str, str, dict[str, int]]]]


class _VolumeStats:
    """kubelet_volume_stats_* of each claim mounted here, read at scrape time; a claim mounted by several
    pods is reported once, as the kubelet's collector does."""

    def __init__(self, source: ClaimStats) -> None:
        self.source = source

    def collect(self):
        families = {key: GaugeMetricFamily(name, text, labels=["namespace", "persistentvolumeclaim"])
                    for key, name, text in VOLUME_STATS}
        health = GaugeMetricFamily("kubelet_volume_stats_health_status_abnormal",
                                   "Abnormal volume health status. The count is either 1 or 0. 1 indicates "
                                   "the volume is unhealthy, 0 indicates volume is healthy",
                                   labels=["namespace", "persistentvolumeclaim"])
        seen = set()
        for ns, claim, stats in self.source():
            if (ns, claim) in seen:
                continue
            seen.add((ns, claim))
            for key, fam in families.items():
                if key in stats:
                    fam.add_metric([ns, claim], stats[key])
            health.add_metric([ns, claim], 0)
        yield from families.values()
        yield health


# pkg/kubelet/server/server.go's labels of kubelet_http_requests_total and kubelet_http_inflight_requests:
# `path` is the request's root path ("metrics/<x>" under /metrics) when it is one of the roots the kubelet
# registers (with its default debugging handlers), else "other"; a method outside HTTP's is "other"; a
# request is long-running by its root alone (a `logs -f` is not), and as there, "portforward" never equals
# the "portForward" root.
HTTP_PATHS = frozenset({"healthz", "pods", "stats", "metrics", "metrics/cadvisor", "metrics/probes",
                        "metrics/resource", "run", "exec", "attach", "portForward", "containerLogs",
                        "configz", "runningpods", "logs", "debug"})
HTTP_METHODS = frozenset({"OPTIONS", "GET", "HEAD", "POST", "PUT", "DELETE", "TRACE", "CONNECT"})
LONG_RUNNING_PATHS = frozenset({"exec", "attach", "portforward", "debug"})


def http_labels(method: str, path: str, server_type: str) -> tuple[str, str, str, str]:
    """(method, path, server_type, long_running) of one request to the kubelet API, as the kubelet
    labels its HTTP metrics."""
    parts = path.removeprefix("/").split("/", 2)
    root = f"{parts[0]}/{parts[1]}" if parts[0] == "metrics" and len(parts) > 1 else parts[0]
    bucket = root if root in HTTP_PATHS else "other"
    return (method if method in HTTP_METHODS else "other", bucket, server_type,
            str(bucket in LONG_RUNNING_PATHS).lower())


# pkg/volume/util/metrics.go's csiOperationsLatencyMetric buckets
CSI_BUCKETS = (.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600)


class KubeletMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.pod_start = Histogram("kubelet_pod_start_duration_seconds",
                                   "Duration in seconds from kubelet seeing a pod for the first "
                                   "time to the pod starting to run", buckets=POD_START_BUCKETS, registry=r)
        self.pod_worker = Histogram("kubelet_pod_worker_duration_seconds",
                                    "Duration in seconds to sync a single pod", ["operation"], registry=r)
        self.pleg_relist = Histogram("kubelet_pleg_relist_duration_seconds",
                                     "Duration in seconds for relisting pods in PLEG", buckets=PLEG_BUCKETS,
                                     registry=r)
        self.pleg_interval = Histogram("kubelet_pleg_relist_interval_seconds",
                                       "Interval in seconds between relisting in PLEG", buckets=PLEG_BUCKETS,
                                       registry=r)
        self.pleg_last_seen = Gauge("kubelet_pleg_last_seen_seconds",
                                    "Timestamp in seconds when PLEG was last seen active", registry=r)
        self.started_containers = Counter("kubelet_started_containers",
                                          "Cumulative number of containers started",
                                          ["container_type"], registry=r)
        self.evictions = Counter("kubelet_evictions", "Cumulative number of pod evictions by eviction signal",
                                 ["eviction_signal"], registry=r)
        self.http_requests = Counter("kubelet_http_requests",
                                     "Number of the http requests received since the "
                                     "server started", ["method", "path", "server_type", "long_running"],
                                     registry=r)
        self.http_inflight = Gauge("kubelet_http_inflight_requests", "Number of the inflight http requests",
                                   ["method", "path", "server_type", "long_running"], registry=r)
        self.csi_operations = Histogram("csi_operations_seconds",
                                        "Container Storage Interface operation duration with gRPC error code "
                                        "status total", ["driver_name", "method_name", "grpc_status_code",
                                                         "migrated"], buckets=CSI_BUCKETS, registry=r)
        gates = Gauge(features.FEATURE_METRIC, features.FEATURE_HELP, ["name", "stage"], registry=r)
        for name, (stage, enabled) in features.FEATURES.items():
            gates.labels(name, stage).set(int(enabled))
        self._running: _Running | None = None

    def observe_csi(self, driver: str, method: str, code: str, seconds: float) -> None:
        """One CSI call of the kubelet (its volume plugin's csi_operations_seconds)."""
        self.csi_operations.labels(driver, method, code, "false").observe(seconds)

    def set_running_source(self, snapshot: Callable[[], tuple[int, dict[str, int]]]) -> None:
        if self._running is None:
            self._running = _Running(snapshot)
            self.registry.register(self._running)

    def set_start_slots_source(self, waiting: Callable[[], int]) -> None:
        """Pods waiting for a start slot (--max-parallel-pod-starts; nodeagent's own gauge)."""
        g = Gauge("nodeagent_kubelet_pod_starts_waiting",
                  "Number of pods waiting for a start slot (--max-parallel-pod-starts)",
                  registry=self.registry)
        g.set_function(waiting)

    def set_volume_source(self, source: ClaimStats) -> None:
        self.registry.register(_VolumeStats(source))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
