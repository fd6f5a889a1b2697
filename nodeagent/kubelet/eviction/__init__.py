"""Node-pressure eviction: threshold flags, signal observation, and the manager's decisions."""

from nodeagent.kubelet.eviction.manager import (
    Eviction,
    EvictionManager,
    PodUsage,
    evicted_status,
    eviction_message,
    local_storage_violation,
    rank_pods,
    thresholds_met,
)
from nodeagent.kubelet.eviction.signals import Observation, observations_from, observe
from nodeagent.kubelet.eviction.thresholds import (
    Threshold,
    ThresholdError,
    Value,
    hard_eviction_reservation,
    parse_duration,
    parse_thresholds,
)

__all__ = ["Eviction", "EvictionManager", "Observation", "PodUsage", "Threshold", "ThresholdError", "Value",
           "evicted_status", "eviction_message", "hard_eviction_reservation", "local_storage_violation",
           "observations_from", "observe", "parse_duration", "parse_thresholds", "rank_pods",
           "thresholds_met"]
