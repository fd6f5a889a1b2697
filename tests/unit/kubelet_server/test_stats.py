"""Summary API assembly from CRI stats: rates from two samples,
pod sums when the runtime has no sandbox stats."""

from __future__ import annotations

from cri.proto import api_pb2 as pb
from cri.proto import api_pb2_grpc
from nodeagent.kubelet.server.stats import Rates, SummaryProvider, net_stats, node_memory
from nodeagent.testing.fake_cri import serve


class FakeCRI(api_pb2_grpc.RuntimeServiceServicer):
    """Two containers of one pod whose CPU grows 0.5 core-seconds per wall second; no ListPodSandboxStats
    (UNIMPLEMENTED, the generated servicer's answer)."""

    def __init__(self) -> None:
        self.calls = 0

    async def ListContainerStats(self, request, context):
        self.calls += 1
        import time

        now = time.time_ns()
        out = []
        for i, name in enumerate(("a", "b")):
            s = pb.ContainerStats()
            s.attributes.id = f"c{i}"
            s.attributes.labels.update({"io.kubernetes.pod.uid": "u1", "io.kubernetes.pod.name": "p",
                                        "io.kubernetes.pod.namespace": "ns",
                                        "io.kubernetes.container.name": name})
            s.cpu.timestamp = now
            s.cpu.usage_core_nano_seconds.value = now // 2
            s.memory.timestamp = now
            s.memory.working_set_bytes.value = 1000 * (i + 1)
            s.memory.usage_bytes.value = 2000 * (i + 1)
            out.append(s)
        return pb.ListContainerStatsResponse(stats=out)


async def test_summary_sums_containers_and_computes_nanocores(tmp_path):
    cri = FakeCRI()
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
           "status": {"startTime": "2024-01-01T00:00:00Z",
                      "containerStatuses": [{"name": "a",
                                             "state": {"running": {"startedAt": "2024-01-01T00:00:01Z"}}}]}}
    async with serve(cri) as client:
        sp = SummaryProvider("n1", client, str(tmp_path), str(tmp_path), lambda: {"u1": pod})
        s = await sp.summary()
        assert cri.calls == 2, "a first look takes a second sample so rates exist"
        assert s["node"]["nodeName"] == "n1" and s["node"]["fs"]["capacityBytes"] > 0
        (p,) = s["pods"]
        assert (p["podRef"] == {"name": "p", "namespace": "ns", "uid": "u1"}
                and p["startTime"] == "2024-01-01T00:00:00Z")
        a, b = p["containers"]
        assert (a["name"], b["name"]) == ("a", "b") and a["startTime"] == "2024-01-01T00:00:01Z"
        for c in (a, b):
            assert abs(c["cpu"]["usageNanoCores"] - 500_000_000) < 50_000_000
        assert p["memory"]["workingSetBytes"] == 3000 and p["memory"]["usageBytes"] == 6000
        assert p["cpu"]["usageCoreNanoSeconds"] == (a["cpu"]["usageCoreNanoSeconds"]
                                                  + b["cpu"]["usageCoreNanoSeconds"])
        await sp.summary()
        assert cri.calls == 3, "known containers need no second sample"


def test_rates_need_a_window_and_ignore_resets():
    r = Rates()
    assert r.rate("x", 1_000_000_000, 10) is None
    assert r.rate("x", 2_000_000_000, 500_000_010) == 500_000_000
    assert r.rate("x", 3_000_000_000, 5) is None  # counter went backwards (a restarted container)


def test_node_readings_are_sane():
    m = node_memory()
    assert 0 < m["workingSetBytes"] <= m["usageBytes"] and m["availableBytes"] > 0
    n = net_stats(0)
    assert all({"name", "rxBytes", "txBytes"} <= set(i) for i in n["interfaces"])
