"""The max-in-flight filter's pools, exemptions and answer, and the client's Retry-After rule."""

from __future__ import annotations

import pytest

from nodeagent.apiserver import inflight
from nodeagent.apiserver.metrics import Metrics
from nodeagent.client.rest import retry_after


@pytest.mark.parametrize(("method", "path", "query", "kind"), [
    ("GET", "/api/v1/namespaces/d/pods", {}, "readOnly"),
    ("GET", "/api/v1/namespaces/d/pods/p", {}, "readOnly"),
    ("POST", "/api/v1/namespaces/d/pods", {}, "mutating"),
    ("PATCH", "/api/v1/namespaces/d/pods/p/status", {}, "mutating"),
    ("DELETE", "/apis/apps/v1/namespaces/d/deployments", {}, "mutating"),
    ("GET", "/api/v1/namespaces/d/pods", {"watch": "true"}, None),
    ("GET", "/api/v1/watch/namespaces/d/pods", {}, None),
    ("GET", "/api/v1/namespaces/d/pods/p/log", {"follow": "true"}, None),
    ("GET", "/api/v1/namespaces/d/pods/p/log", {}, None),  # kube counts every log request long-running
    ("POST", "/api/v1/namespaces/d/pods/p/exec", {}, None),
    ("POST", "/api/v1/namespaces/d/pods/p/attach", {}, None),
    ("POST", "/api/v1/namespaces/d/pods/p/portforward", {}, None),
    ("GET", "/api/v1/nodes/n/proxy/metrics", {}, None),
    ("GET", "/apis", {}, "readOnly"),  # discovery and other non-resource paths count by method
    ("POST", "/apis/nope.example/v1/things", {}, "mutating"),
])
def test_request_kind(method, path, query, kind):
    assert inflight.request_kind(method, path, query) == kind


def test_full_pool_refuses_with_kubes_429_and_frees_on_exit():
    m = Metrics()
    limit = inflight.InFlightLimit(read_only=1, mutating=2, metrics=m)
    with limit.admit("mutating", ()), limit.admit("mutating", ()):
        with pytest.raises(inflight.TooManyRequests), limit.admit("mutating", ()):
            pass
        with limit.admit("readOnly", ()):  # the other pool has its own limit
            pass
        with limit.admit(None, ()):  # long-running: no slot
            pass
    # kube's filters.tooManyRequests: Go's http.Error, plain text, not a Status
    assert inflight.plain_answer() == (429, b"Too many requests, please try again later.\n",
                                       {"Retry-After": "1", "Content-Type": "text/plain; charset=utf-8",
                                        "X-Content-Type-Options": "nosniff"})
    assert limit.current == {"readOnly": 0, "mutating": 0}
    with limit.admit("mutating", ()):  # freed after the refusal too
        pass
    text = m.render().decode()
    assert 'apiserver_dropped_requests_total{request_kind="mutating"} 1.0' in text
    assert 'apiserver_current_inflight_requests{request_kind="mutating"} 0.0' in text


def test_masters_are_served_past_the_limit_without_a_slot():
    limit = inflight.InFlightLimit(read_only=1, mutating=1)
    with limit.admit("readOnly", ()):
        with limit.admit("readOnly", ("system:masters",)):
            assert limit.current["readOnly"] == 1
        with pytest.raises(inflight.TooManyRequests):
            with limit.admit("readOnly", ("system:authenticated",)):
                pass


def test_zero_is_no_limit_and_negative_is_refused():
    limit = inflight.InFlightLimit(read_only=0, mutating=0)
    with limit.admit("mutating", ()), limit.admit("mutating", ()):
        assert limit.current["mutating"] == 2
    with pytest.raises(ValueError):
        inflight.InFlightLimit(read_only=-1)


@pytest.mark.parametrize(("status", "header", "wait"), [
    (429, "1", 1.0), (503, "2", 2.0), (500, "0", 0.0),
    (429, None, None), (404, "1", None), (200, "1", None), (429, "soon", None),
])
def test_client_retries_when_the_server_says_retry_after(status, header, wait):
    assert retry_after(status, header) == wait
