"""The node lifecycle loop, IPAM and PodGC decisions, driven with a fake clock and in-memory caches."""

from __future__ import annotations

import datetime as dt

import pytest

from nodeagent.api import taints as t
from nodeagent.controllers import nodeipam, podgc
from nodeagent.controllers.nodelifecycle import ZONE_LABEL
from nodeagent.controllers.nodelifecycle_controller import NodeLifecycleController
from nodeagent.controllers.options import ControllerOptions
from nodeagent.testing.clock import FakeClock
from tests.unit.controllers.fakes import FakeClient, FakeInformers, FakeRecorder


def node(name, zone="z1"):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {ZONE_LABEL: zone}, "resourceVersion": "1", "uid": name},
            "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True",
                                                    "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]}}


def lease(name, renew):
    return {"metadata": {"name": name, "namespace": "kube-node-lease"}, "spec": {"renewTime": renew}}


def make(n_nodes, zone_of=lambda i: "z1", **opts):
    clock = FakeClock(dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp())
    inf = FakeInformers()
    client = FakeClient(inf)
    rec = FakeRecorder()
    o = ControllerOptions(clock=clock, **{"node_monitor_grace_period": 40, **opts})
    ctl = NodeLifecycleController(client, inf, rec, o)
    for i in range(n_nodes):
        inf.get("nodes").put(node(f"n{i}", zone_of(i)))
    return ctl, inf, client, rec, clock


def taints_of(inf, name):
    return {(x["key"], x["effect"]) for x in (inf.get("nodes").get(name)["spec"].get("taints") or [])}


def heartbeat(inf, names, clock):
    for n in names:
        inf.get("leases").put(lease(n, f"t{clock.monotonic()}"))


async def test_silent_node_goes_unknown_after_grace_and_is_tainted():
    ctl, inf, client, rec, clock = make(2)
    for _ in range(10):  # n0 and n1 renew their leases for 50 s: nothing happens
        heartbeat(inf, ["n0", "n1"], clock)
        await ctl.monitor_once()
        clock.advance(5)
    assert not taints_of(inf, "n0") and not rec.events
    for _ in range(10):  # n0 stops; 40 s is the grace period
        heartbeat(inf, ["n1"], clock)
        await ctl.monitor_once()
        clock.advance(5)
        ready = inf.get("nodes").get("n0")["status"]["conditions"][0]["status"]
        if ctl.tracker.silent_for("n0") <= 40:
            assert ready == "True"
    assert ready == "Unknown"
    assert taints_of(inf, "n0") == {(t.UNREACHABLE, "NoExecute"), (t.UNREACHABLE, "NoSchedule")}
    assert not taints_of(inf, "n1")
    assert ("n0", "NodeNotReady", "Node n0 status is now: NodeNotReady") in rec.events
    # the kubelet comes back: Ready again (as it would post), taints go at once
    st = inf.get("nodes").get("n0")
    st["status"]["conditions"][0]["status"] = "True"
    inf.get("nodes").put(st)
    heartbeat(inf, ["n0", "n1"], clock)
    await ctl.monitor_once()
    assert not taints_of(inf, "n0")


async def test_zone_rate_limits_noexecute_tainting_on_a_fake_clock():
    # 10 nodes in z1, all going silent at once, rate 0.1/s: one NoExecute taint per 10 s.
    # z2 keeps one healthy node, so not every zone is fully disrupted.
    ctl, inf, client, rec, clock = make(11, zone_of=lambda i: "z1" if i < 10 else "z2",
                                        node_eviction_rate=0.1)
    for _ in range(9):
        heartbeat(inf, ["n10"], clock)
        await ctl.monitor_once()
        clock.advance(5)
    # z1 is now FullDisruption (all Unknown), z2 Normal: z1 keeps the normal rate (0.1/s).
    counts = []
    for _ in range(12):  # 60 s, one pass per 5 s
        heartbeat(inf, ["n10"], clock)
        await ctl.monitor_once()
        counts.append(sum((t.UNREACHABLE, "NoExecute") in taints_of(inf, f"n{i}") for i in range(10)))
        clock.advance(5)
    # every node got NoSchedule at once, but NoExecute at most 1 per 10 s of fake time (burst 1)
    assert all((t.UNREACHABLE, "NoSchedule") in taints_of(inf, f"n{i}") for i in range(10))
    assert counts[-1] <= 1 + 55 / 10 + 1e-9 and counts[-1] >= 5
    assert all(b - a <= 1 for a, b in zip(counts, counts[1:], strict=False))


async def test_no_tainting_when_every_zone_is_fully_disrupted():
    ctl, inf, client, rec, clock = make(3, zone_of=lambda i: f"z{i}")
    for _ in range(20):
        await ctl.monitor_once()
        clock.advance(5)
    assert all(inf.get("nodes").get(f"n{i}")["status"]["conditions"][0]["status"] == "Unknown"
               for i in range(3))
    assert all((t.UNREACHABLE, "NoExecute") not in taints_of(inf, f"n{i}") for i in range(3))
    assert all((t.UNREACHABLE, "NoSchedule") in taints_of(inf, f"n{i}") for i in range(3))


async def test_taint_manager_evicts_after_toleration_seconds():
    ctl, inf, client, rec, clock = make(1)
    n = inf.get("nodes").get("n0")
    n["spec"]["taints"] = [{"key": t.UNREACHABLE, "effect": "NoExecute"}]
    inf.get("nodes").put(n)

    def pod(name, tol):
        return {"kind": "Pod", "apiVersion": "v1",
                "metadata": {"name": name, "namespace": "d", "uid": name},
                "spec": {"nodeName": "n0", "tolerations": tol}}
    inf.get("pods").put(pod("none", []))
    inf.get("pods").put(pod("short", [{"key": t.UNREACHABLE, "operator": "Exists", "effect": "NoExecute",
                                       "tolerationSeconds": 30}]))
    inf.get("pods").put(pod("forever", [{"key": t.UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}]))
    await ctl.taint_manager_once()
    assert [c[2] for c in client.calls if c[0] == "delete"] == ["none"]
    clock.advance(29)
    await ctl.taint_manager_once()
    assert [c[2] for c in client.calls if c[0] == "delete"] == ["none"]
    clock.advance(2)
    await ctl.taint_manager_once()
    clock.advance(3600)
    await ctl.taint_manager_once()
    assert [c[2] for c in client.calls if c[0] == "delete"] == ["none", "short"]
    assert [e[1] for e in rec.events] == ["TaintManagerEviction"] * 2


def test_cidr_set_allocates_distinct_subnets_and_reuses_released():
    s = nodeipam.CidrSet("10.244.0.0/16", 24)
    assert s.size == 256
    assert s.occupy("10.244.0.0/24") and not s.occupy("192.168.0.0/24") and not s.occupy("10.244.1.0/25")
    got = [s.allocate() for _ in range(255)]
    assert got[0] == "10.244.1.0/24" and len(set(got)) == 255 and "10.244.0.0/24" not in got
    with pytest.raises(nodeipam.CIDRSetFull):
        s.allocate()
    s.release("10.244.7.0/24")
    assert s.allocate() == "10.244.7.0/24"
    with pytest.raises(ValueError):
        nodeipam.CidrSet("10.0.0.0/24", 16)


def test_podgc_decisions():
    def pod(name, node=None, phase="Running", ts="2026-01-01T00:00:00Z", deleting=False):
        p = {"metadata": {"name": name, "creationTimestamp": ts}, "spec": {}, "status": {"phase": phase}}
        if node:
            p["spec"]["nodeName"] = node
        if deleting:
            p["metadata"]["deletionTimestamp"] = ts
        return p
    pods = [pod("a", "n1"), pod("b", "gone"), pod("c"), pod("d", deleting=True)]
    assert [p["metadata"]["name"] for p in podgc.orphaned(pods, {"n1"})] == ["b"]
    assert [p["metadata"]["name"] for p in podgc.unscheduled_terminating(pods)] == ["d"]
    done = [pod(f"t{i}", "n1", "Succeeded", f"2026-01-01T00:00:0{i}Z") for i in range(5)]
    assert [p["metadata"]["name"] for p in podgc.terminated_over_threshold(done, 3)] == ["t0", "t1"]
    assert podgc.terminated_over_threshold(done, 0) == []


async def test_pods_on_an_unknown_node_are_marked_not_ready():
    ctl, inf, client, rec, clock = make(2)
    for name, node_name in (("a", "n0"), ("b", "n1")):
        inf.get("pods").put({"kind": "Pod", "apiVersion": "v1",
                             "metadata": {"name": name, "namespace": "d", "uid": name},
                             "spec": {"nodeName": node_name},
                             "status": {"phase": "Running", "conditions": [
                                 {"type": "Ready", "status": "True"},
                                 {"type": "ContainersReady", "status": "True"}]}})
    for _ in range(10):
        heartbeat(inf, ["n1"], clock)
        await ctl.monitor_once()
        clock.advance(5)

    def ready(name):
        return {c["type"]: c["status"] for c in inf.get("pods").get(name, "d")["status"]["conditions"]}
    assert ready("a") == {"Ready": "False", "ContainersReady": "False"}
    assert ready("b") == {"Ready": "True", "ContainersReady": "True"}
    n_writes = len([c for c in client.calls if c[:2] == ("status", "pods")])
    await ctl.monitor_once()  # idempotent: no second write
    assert len([c for c in client.calls if c[:2] == ("status", "pods")]) == n_writes == 1


async def test_partially_disrupted_large_zone_uses_the_secondary_rate_small_zone_stops():
    # z1: 6 nodes (large with threshold 5), 4 go silent -> PartialDisruption -> 0.01 node/s.
    # z2: 3 nodes stay healthy, so not every zone is down.
    def zone(i):
        return "z1" if i < 6 else "z2"
    live = [f"n{i}" for i in range(4, 9)]
    ctl, inf, client, rec, clock = make(9, zone_of=zone, large_cluster_size_threshold=5,
                                        node_eviction_rate=0.1, secondary_node_eviction_rate=0.01)
    for _ in range(10):
        heartbeat(inf, live, clock)
        await ctl.monitor_once()
        clock.advance(5)
    assert ctl.zone_states[next(z for z in ctl.zone_states if z.endswith("z1"))] == "PartialDisruption"
    counts = []
    for _ in range(60):  # 300 s of fake time: at 0.01/s at most one token after the first (burst 1) is spent
        heartbeat(inf, live, clock)
        await ctl.monitor_once()
        counts.append(sum((t.UNREACHABLE, "NoExecute") in taints_of(inf, f"n{i}") for i in range(4)))
        clock.advance(5)
    # the first taint went on when the zone turned (a full bucket); the next come 100 s apart
    assert set(counts[:17]) == {1}  # 5..90 s later: still one
    assert 3 <= counts[-1] <= 4  # 300 s later: 1 + 300 * 0.01

    # the same disruption with a small-cluster threshold:
    # a small partially disrupted zone is not tainted at all
    ctl, inf, client, rec, clock = make(9, zone_of=zone, large_cluster_size_threshold=50)
    for _ in range(70):
        heartbeat(inf, live, clock)
        await ctl.monitor_once()
        clock.advance(5)
    assert sum((t.UNREACHABLE, "NoExecute") in taints_of(inf, f"n{i}") for i in range(4)) == 0


async def test_podgc_waits_out_the_quarantine_before_deleting_orphans():
    from nodeagent.controllers.podgc_controller import PodGCController

    clock = FakeClock()
    inf = FakeInformers()
    client = FakeClient(inf)
    ctl = PodGCController(client, inf, FakeRecorder(),
                          ControllerOptions(clock=clock, pod_gc_orphan_quarantine=40))
    inf.get("nodes").put(node("n1"))
    for name, on in (("early", "late-node"), ("orphan", "gone"), ("fine", "n1")):
        inf.get("pods").put({"metadata": {"name": name, "namespace": "d", "uid": name},
                             "spec": {"nodeName": on}, "status": {"phase": "Running"}})
    assert await ctl.gc_once() == 0  # first seen missing: quarantined
    clock.advance(30)
    inf.get("nodes").put(node("late-node"))  # registers within the quarantine: its pod is kept
    assert await ctl.gc_once() == 0
    clock.advance(15)
    assert await ctl.gc_once() == 1  # 45 s missing and confirmed by a live GET
    assert {p["metadata"]["name"] for p in inf.get("pods").list()} == {"early", "fine"}


@pytest.mark.parametrize("lease_duration,flagged", [(40, True), (8, False)])
async def test_a_live_node_stays_ready_only_when_it_renews_well_within_the_grace(lease_duration, flagged):
    """A grace period of 8 s (the 3-node lab's) against the kubelet's default 40 s Lease, renewed every 10 s:
    a renewal that lands just after a monitor pass is seen 10 s after the one before, past the grace, so a
    live node goes Unknown (and its pods' short NoExecute tolerations run out). With the Lease lasting the
    grace, renewed every quarter of it (kubelet's renewIntervalFraction), it never does."""
    from nodeagent.kubelet.node import RENEW_INTERVAL_FRACTION

    ctl, inf, client, rec, clock = make(1, node_monitor_grace_period=8)
    renew_every = lease_duration * RENEW_INTERVAL_FRACTION + 0.05  # + the renewal's own time
    monitor_every = 5 + 0.01  # --node-monitor-period + a pass's own time
    next_renew, next_monitor, end = 0.0, 0.02, clock.monotonic() + 1800
    start = clock.monotonic()
    while clock.monotonic() < end and not rec.events:
        due = min(next_renew, next_monitor)
        clock.advance(start + due - clock.monotonic())
        if due == next_renew:
            heartbeat(inf, ["n0"], clock)
            next_renew += renew_every
        else:
            await ctl.monitor_once()
            next_monitor += monitor_every
    assert bool(rec.events) == flagged, rec.events
