"""Prometheus metrics for `/metrics` (apiserver_request_total, apiserver_request_duration_seconds,
apiserver_watch_events_total, apiserver_registered_watchers), in a registry of the server's own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from nodeagent.api import features


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("apiserver_request_total", "Requests by verb, resource and HTTP code",
                                ["verb", "group", "resource", "subresource", "code"], registry=self.registry)
        self.duration = Histogram("apiserver_request_duration_seconds",
                                  "Time to answer (watch: the life of the stream)", ["verb", "resource"],
                                  registry=self.registry,
                                  buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                           0.5, 1, 2.5, 5))
        self.watchers = Gauge("apiserver_registered_watchers", "Open watch streams", ["resource"],
                              registry=self.registry)
        gates = Gauge(features.FEATURE_METRIC, features.FEATURE_HELP, ["name", "stage"],
                      registry=self.registry)
        for name, (stage, enabled) in features.FEATURES.items():
            gates.labels(name, stage).set(int(enabled))

    def observe(self, verb: str, group: str, resource: str, sub: str, code: int, seconds: float) -> None:
        self.requests.labels(verb, group, resource, sub, str(code)).inc()
        self.duration.labels(verb, resource).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
