"""Prometheus metrics for `/metrics` (apiserver_request_total, apiserver_request_duration_seconds,
apiserver_watch_events_total, apiserver_registered_watchers, the admission webhooks' calls), in a registry of
the server's own."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from nodeagent.api import features


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("apiserver_request_total", "Requests by verb, resource and HTTP code",
                                ["verb", "group", "resource", "subresource", "code"], registry=self.registry)
        # kube-apiserver's buckets, so the scalability SLOs (p99 <= 1 s, 5 s, 30 s) read off them as there
        self.duration = Histogram("apiserver_request_duration_seconds",
                                  "Time to answer (watch: the life of the stream)",
                                  ["verb", "group", "resource", "subresource", "scope"],
                                  registry=self.registry,
                                  buckets=(0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3,
                                           4, 5, 6, 8, 10, 15, 20, 30, 45, 60))
        self.inflight = Gauge("apiserver_current_inflight_requests",
                              "Requests being served, by kind (readOnly, mutating), long-running ones aside",
                              ["request_kind"], registry=self.registry)
        self.dropped = Counter("apiserver_dropped_requests_total",
                               "Requests refused with 429 by --max-requests-inflight and "
                               "--max-mutating-requests-inflight, by kind", ["request_kind"],
                               registry=self.registry)
        self.watchers = Gauge("apiserver_registered_watchers", "Open watch streams", ["resource"],
                              registry=self.registry)
        self.webhook_duration = Histogram(
            "apiserver_admission_webhook_admission_duration_seconds",
            "Admission webhook latency by name, type (admit or validating), operation and rejection",
            ["name", "type", "operation", "rejected"], registry=self.registry,
            buckets=(0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10, 25))
        self.webhook_rejections = Counter(
            "apiserver_admission_webhook_rejection_count",
            "Admission webhook rejections by name, type, operation, error type and code",
            ["name", "type", "operation", "error_type", "rejection_code"], registry=self.registry)
        self.webhook_fail_open = Counter(
            "apiserver_admission_webhook_fail_open_count",
            "Admission webhook calls that failed and were ignored (failurePolicy Ignore)",
            ["name", "type"], registry=self.registry)
        # the per-request series' children by label values: prometheus_client's labels() validates and
        # takes a lock on every call (2 % of the server's CPU under SchedulingBasic); series are never removed
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        gates = Gauge(features.FEATURE_METRIC, features.FEATURE_HELP, ["name", "stage"],
                      registry=self.registry)
        for name, (stage, enabled) in features.FEATURES.items():
            gates.labels(name, stage).set(int(enabled))

    def observe(self, verb: str, group: str, resource: str, sub: str, code: int, seconds: float,
                scope: str = "") -> None:
        """One answered request; `scope` as kube's label: resource (one object), namespace or cluster."""
        self.child(self.requests, (verb, group, resource, sub, str(code))).inc()
        self.child(self.duration, (verb, group, resource, sub, scope)).observe(seconds)

    def child(self, metric: Any, values: tuple[str, ...]) -> Any:
        """`metric.labels(*values)`, looked up once per series."""
        c = self._children.get((metric, values))
        if c is None:
            c = self._children[(metric, values)] = metric.labels(*values)
        return c

    def observe_webhook(self, name: str, kind: str, operation: str, seconds: float, error_type: str | None,
                        code: int, failed_open: bool) -> None:
        """One webhook call as kube-apiserver counts it: `error_type` None when allowed, else
        calling_webhook_error, no_error (refused) or apiserver_internal_error."""
        rejected = error_type is not None and not failed_open
        self.webhook_duration.labels(name, kind, operation, str(rejected).lower()).observe(seconds)
        if rejected:
            self.webhook_rejections.labels(name, kind, operation, error_type, str(code)).inc()
        if failed_open:
            self.webhook_fail_open.labels(name, kind).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
