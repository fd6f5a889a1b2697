"""`--config`: a KubeletConfiguration file (kubelet.config.k8s.io/v1beta1 YAML) read as kubelet reads it,
strictly: an unknown field is refused with its name (kubelet's strict decoding), a KubeletConfiguration field
nodeagent does not implement is refused saying so, never ignored. The result is KubeletConfig field values;
flags given on the command line override them (`nodeagent.commands.configs`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from nodeagent.kubelet.eviction.thresholds import ThresholdError, parse_duration

API_VERSION = "kubelet.config.k8s.io/v1beta1"
KIND = "KubeletConfiguration"


class ConfigFileError(ValueError):
    """The file cannot be used (the message names the file and the field)."""


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError("expected a string")
    return v


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("expected an integer")
    return v


def _duration(v: Any) -> float:
    return parse_duration(_str(v))


def _map(sep: str) -> Callable[[Any], str]:
    def conv(v: Any) -> str:
        if not isinstance(v, dict):
            raise TypeError("expected a map of strings")
        return ",".join(f"{k}{sep}{_str(x)}" for k, x in v.items())
    return conv


def _pairs(v: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(v, dict):
        raise TypeError("expected a map of strings")
    return tuple((str(k), _str(x)) for k, x in v.items())


def _strings(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list):
        raise TypeError("expected a list of strings")
    return tuple(_str(x) for x in v)


# KubeletConfiguration field → (KubeletConfig field, converter)
FIELDS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "evictionHard": ("eviction_hard", _map("<")),
    "evictionSoft": ("eviction_soft", _map("<")),
    "evictionSoftGracePeriod": ("eviction_soft_grace_period", _map("=")),
    "evictionMinimumReclaim": ("eviction_minimum_reclaim", _map("=")),
    "evictionMaxPodGracePeriod": ("eviction_max_pod_grace_period", _int),
    "evictionPressureTransitionPeriod": ("eviction_pressure_transition_period", _duration),
    "systemReserved": ("system_reserved", _pairs),
    "kubeReserved": ("kube_reserved", _pairs),
    "enforceNodeAllocatable": ("enforce_node_allocatable", _strings),
    "systemReservedCgroup": ("system_reserved_cgroup", _str),
    "kubeReservedCgroup": ("kube_reserved_cgroup", _str),
    "imageGCHighThresholdPercent": ("image_gc_high_threshold", _int),
    "imageGCLowThresholdPercent": ("image_gc_low_threshold", _int),
    "imageMinimumGCAge": ("image_minimum_gc_age", _duration),
    "imageMaximumGCAge": ("image_maximum_gc_age", _duration),
    "cpuManagerPolicy": ("cpu_manager_policy", _str),
    "reservedSystemCPUs": ("reserved_cpus", _str),
    "cpuManagerReconcilePeriod": ("cpu_manager_reconcile_period", _duration),
    "memoryManagerPolicy": ("memory_manager_policy", _str),
    "topologyManagerPolicy": ("topology_manager_policy", _str),
    "maxPods": ("max_pods", _int),
    "nodeLeaseDurationSeconds": ("node_lease_duration", _int),
    "podsPerCore": ("pods_per_core", _int),
    "kubeAPIQPS": ("kube_api_qps", _int),
    "kubeAPIBurst": ("kube_api_burst", _int),
    "eventRecordQPS": ("event_qps", _int),
    "eventBurst": ("event_burst", _int),
    "clusterDNS": ("cluster_dns", _strings),
    "clusterDomain": ("cluster_domain", _str),
    "allowedUnsafeSysctls": ("allowed_unsafe_sysctls", _strings),
    "syncFrequency": ("resync", _duration),
    "httpCheckFrequency": ("http_check_frequency", _duration),
    "staticPodURL": ("manifest_url", _str),
    "resolvConf": ("resolv_conf", _str),
}

# KubeletConfiguration v1beta1 fields nodeagent's kubelet does not implement: refused by name, not ignored.
NOT_IMPLEMENTED = (
    "enableServer", "staticPodPath", "podLogsDir", "fileCheckFrequency", "staticPodURLHeader",
    "address", "port", "readOnlyPort", "tlsCertFile", "tlsPrivateKeyFile", "tlsCipherSuites", "tlsMinVersion",
    "rotateCertificates", "serverTLSBootstrap", "authentication", "authorization", "registryPullQPS",
    "registryBurst", "imagePullCredentialsVerificationPolicy", "preloadedImagesVerificationAllowlist",
    "enableDebuggingHandlers", "enableContentionProfiling", "healthzPort",
    "healthzBindAddress", "oomScoreAdj", "streamingConnectionIdleTimeout", "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency", "imageServiceEndpoint", "volumeStatsAggPeriod",
    "kubeletCgroups", "systemCgroups", "cgroupRoot", "cgroupsPerQOS", "cgroupDriver", "singleProcessOOMKill",
    "cpuCFSQuota", "cpuCFSQuotaPeriod", "topologyManagerScope",
    "topologyManagerPolicyOptions", "cpuManagerPolicyOptions", "qosReserved", "runtimeRequestTimeout",
    "hairpinMode", "podPidsLimit", "containerLogMaxSize", "containerLogMaxFiles", "containerLogMaxWorkers",
    "containerLogMonitorInterval", "configMapAndSecretChangeDetectionStrategy", "protectKernelDefaults",
    "makeIPTablesUtilChains", "iptablesMasqueradeBit", "iptablesDropBit", "featureGates", "failSwapOn",
    "memorySwap", "serializeImagePulls", "maxParallelImagePulls",
    "kernelMemcgNotification", "logging", "enableSystemLogHandler", "enableSystemLogQuery",
    "shutdownGracePeriod", "shutdownGracePeriodCriticalPods", "shutdownGracePeriodByPodPriority",
    "crashLoopBackOff", "reservedMemory", "enableProfilingHandler", "enableDebugFlagsHandler",
    "seccompDefault", "memoryThrottlingFactor", "registerWithTaints", "registerNode", "tracing",
    "localStorageCapacityIsolation", "containerRuntimeEndpoint", "failCgroupV1", "userNamespaces",
    "providerID", "resolverConfig", "mergeDefaultEvictionSettings",
)


def read(path: str) -> dict[str, Any]:
    """The file's settings as KubeletConfig fields (blocking read, at start)."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise ConfigFileError(f"failed to load Kubelet config file {path}, error failed to read kubelet "
                              f"config file \"{path}\", error: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigFileError(f"failed to load Kubelet config file {path}, error {e}") from None
    return from_document(doc, path)


def from_document(doc: Any, path: str = "<config>") -> dict[str, Any]:
    def fail(why: str) -> ConfigFileError:
        return ConfigFileError(f"failed to load Kubelet config file {path}, error {why}")

    if not isinstance(doc, dict):
        raise fail("the file is not a KubeletConfiguration object")
    if doc.get("kind") != KIND or doc.get("apiVersion") != API_VERSION:
        raise fail(f'no kind "{doc.get("kind")}" is registered for version "{doc.get("apiVersion")}": '
                   f"expected {API_VERSION} {KIND}")
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if key in ("apiVersion", "kind"):
            continue
        if key in FIELDS:
            field, conv = FIELDS[key]
            try:
                out[field] = conv(value)
            except (TypeError, ThresholdError) as e:
                raise fail(f'field "{key}": {e}') from None
            continue
        if key in NOT_IMPLEMENTED:
            raise fail(f'field "{key}" is not implemented by nodeagent\'s kubelet (remove it, or use its '
                       "flag where nodeagent has one)")
        raise fail(f'strict decoding error: unknown field "{key}"')
    return out

