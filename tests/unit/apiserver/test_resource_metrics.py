"""metrics-server's decoding and storage: rates from two cumulative samples, fresh containers, a failed
node."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodeagent.api.times import format_duration, parse_duration
from nodeagent.apiserver.metrics_api import cpu_quantity, memory_quantity
from nodeagent.apiserver.resource_metrics import NodeScrape, Point, Scraper, Storage, decode


def exposition(node_cpu: float, ts: float, containers: dict[str, tuple[float, int, float]]) -> str:
    """A /metrics/resource answer as the kubelet writes it (timestamps in milliseconds)."""
    ms = int(ts * 1000)
    lines = ["# TYPE node_cpu_usage_seconds_total counter", f"node_cpu_usage_seconds_total {node_cpu} {ms}",
             "# TYPE node_memory_working_set_bytes gauge", f"node_memory_working_set_bytes 1.5e+09 {ms}",
             "# TYPE container_cpu_usage_seconds_total counter"]
    for name, (cpu, _, _) in containers.items():
        labels = f'container="{name}",namespace="ns",pod="p"'
        lines.append(f"container_cpu_usage_seconds_total{{{labels}}} {cpu} {ms}")
    lines.append("# TYPE container_memory_working_set_bytes gauge")
    for name, (_, mem, _) in containers.items():
        labels = f'container="{name}",namespace="ns",pod="p"'
        lines.append(f"container_memory_working_set_bytes{{{labels}}} {mem} {ms}")
    lines.append("# TYPE container_start_time_seconds gauge")
    for name, (_, _, start) in containers.items():
        lines.append(f'container_start_time_seconds{{container="{name}",namespace="ns",pod="p"}} {start}')
    lines += ["# TYPE scrape_error gauge", "scrape_error 0"]
    return "\n".join(lines) + "\n"


def test_decode_reads_node_and_container_points_with_their_timestamps():
    s = decode(exposition(100.0, 1000.5, {"app": (2.5, 4096, 900.0)}))
    assert s.node == Point(1000.5, 100.0, 1_500_000_000)
    assert s.pods == {("ns", "p"): {"app": Point(1000.5, 2.5, 4096, 900.0)}}


def test_decode_drops_incomplete_container_points():
    s = decode(exposition(100.0, 1000.0, {"zero-cpu": (0.0, 4096, 900.0), "zero-mem": (1.0, 0, 900.0)}))
    assert s.pods == {}


def test_cpu_is_the_rate_between_the_last_two_scrapes_and_memory_the_last():
    st = Storage(resolution=15)
    st.store({"n1": decode(exposition(100.0, 1000.0, {"app": (10.0, 1000, 1.0)}))})
    assert st.node("n1") is None and st.pod("ns", "p") is None  # one sample: no rate yet
    st.store({"n1": decode(exposition(103.0, 1015.0, {"app": (13.0, 2048, 1.0)}))})
    node = st.node("n1")
    assert node is not None and node.cpu_nanocores == 200_000_000 and node.window == 15.0
    got = st.pod("ns", "p")
    assert got is not None
    when, [(name, usage)] = got
    assert name == "app" and usage.cpu_nanocores == 200_000_000 and usage.memory == 2048
    assert when.ts == 1015.0 and when.window == 15.0


def test_a_fresh_container_has_metrics_after_its_first_scrape():
    st = Storage(resolution=60)
    st.store({"n1": decode(exposition(100.0, 1000.0, {"app": (3.0, 1000, 985.0)}))})  # started 15 s ago
    got = st.pod("ns", "p")
    assert got is not None and got[1][0][1].cpu_nanocores == 200_000_000


def test_a_counter_that_went_back_has_no_rate():
    st = Storage()
    st.store({"n1": NodeScrape(Point(1000.0, 50.0, 1), {})})
    st.store({"n1": NodeScrape(Point(1015.0, 40.0, 1), {})})
    assert st.node("n1") is None


def test_a_node_whose_scrape_fails_is_missing_and_the_others_are_not():
    st = Storage()
    nodes = [{"metadata": {"name": n}} for n in ("good", "bad")]
    t = [1000.0]

    async def fetch(name: str, host: str, port: int) -> str:
        if name == "bad":
            raise OSError("connection refused")
        return exposition(t[0] / 10, t[0], {"app": (t[0] / 100, 4096, 1.0)})

    async def list_nodes() -> list[dict[str, Any]]:
        return nodes

    scraper = Scraper(st, list_nodes, lambda n: ("127.0.0.1", 10250), fetch)
    asyncio.run(scraper.scrape_once())
    t[0] = 1015.0
    asyncio.run(scraper.scrape_once())
    assert st.node("good") is not None and st.node("bad") is None
    assert st.pod("ns", "p") is not None
    assert "connection refused" in scraper.failures["bad"]


@pytest.mark.parametrize("seconds,want", [(15.0, "15s"), (15.002, "15.002s"), (60.5, "1m0.5s"),
                                          (3725.0, "1h2m5s"), (0.25, "250ms"), (0, "0s")])
def test_window_is_written_as_a_go_duration_and_read_back(seconds, want):
    assert format_duration(seconds) == want
    assert parse_duration(want) == pytest.approx(seconds)


@pytest.mark.parametrize("nanocores,want", [(0, "0"), (200_000_000, "200m"), (2_000_000_000, "2"),
                                            (123_456_789, "123456789n"), (5_000, "5u")])
def test_cpu_quantity_is_canonical(nanocores, want):
    assert cpu_quantity(nanocores) == want


@pytest.mark.parametrize("n,want", [(0, "0"), (4096, "4Ki"), (3 << 20, "3Mi"), (1000, "1000")])
def test_memory_quantity_is_binary_si(n, want):
    assert memory_quantity(n) == want


def test_scale_of_a_custom_resource_follows_its_crd_paths():
    from nodeagent.apiserver.subresources import ScalePaths, to_scale

    obj = {"kind": "Thing", "metadata": {"name": "t", "namespace": "ns"},
           "spec": {"size": 3}, "status": {"count": 2, "sel": "app=t"}}
    scale = to_scale(obj, ScalePaths(".spec.size", ".status.count", ".status.sel"))
    assert scale["spec"] == {"replicas": 3} and scale["status"] == {"replicas": 2, "selector": "app=t"}
    assert to_scale(obj, ScalePaths(".spec.size", ".status.count", ""))["status"]["selector"] == ""


def test_scale_selector_is_the_full_label_selector_and_a_controllers_map():
    from nodeagent.apiserver.subresources import to_scale

    deploy = {"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 2, "selector": {
        "matchLabels": {"app": "d"}, "matchExpressions": [{"key": "tier", "operator": "In",
                                                            "values": ["web", "api"]}]}}}
    assert to_scale(deploy)["status"]["selector"] == "app=d,tier in (api,web)"
    rc = {"kind": "ReplicationController", "metadata": {"name": "r"}, "spec": {"replicas": 1,
                                                                              "selector": {"app": "r"}}}
    assert to_scale(rc)["status"]["selector"] == "app=r"
