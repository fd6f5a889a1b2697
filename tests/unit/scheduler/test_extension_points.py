"""An out-of-tree plugin at Reserve, Permit, PreBind and PostBind: call order, waiting, failure paths."""

import asyncio
import random
import types

from nodeagent.scheduler.framework import Code, Status
from nodeagent.scheduler.profile import parse_config
from nodeagent.scheduler.scheduler import Scheduler
from nodeagent.testing.clock import FakeClock
from nodeagent.testing.fake_cluster import FakeCluster, make_node, make_pod


class Recorder:
    name = "Recorder"

    def __init__(self):
        self.calls = []
        self.wait = 0.0
        self.fail_prebind = set()

    def reserve(self, state, pod, node):
        self.calls.append(("reserve", pod.name, node))

    def unreserve(self, state, pod, node):
        self.calls.append(("unreserve", pod.name, node))

    def permit(self, state, pod, node):
        self.calls.append(("permit", pod.name, node))
        return (Status(Code.WAIT), self.wait) if self.wait else (None, 0.0)

    async def pre_bind(self, state, pod, node):
        self.calls.append(("pre_bind", pod.name, node))
        if pod.name in self.fail_prebind:
            return Status(Code.ERROR, ("volume not ready",))
        return None

    def post_bind(self, state, pod, node):
        self.calls.append(("post_bind", pod.name, node))


def setup():
    rec = Recorder()
    mod = types.SimpleNamespace(NAME="Recorder", new=lambda args, handle: rec)
    cfg = parse_config({"profiles": [{"plugins": {"multiPoint": {"enabled": [{"name": "Recorder"}]}}}]})
    cluster = FakeCluster()
    clock = FakeClock()
    s = Scheduler(cfg, cluster.api(), clock=clock, rng=random.Random(3), out_of_tree={"Recorder": mod})
    cluster.subscribe(s)
    cluster.add_node(make_node("n", cpu="1"))
    return rec, cluster, s, clock


async def test_reserve_permit_prebind_postbind_in_order():
    rec, cluster, s, _ = setup()
    cluster.add_pod(make_pod("p", cpu="1"))
    await s.drain()
    assert [c[0] for c in rec.calls] == ["reserve", "permit", "pre_bind", "post_bind"]
    assert cluster.node_of("p") == "n"


async def test_prebind_failure_unreserves_forgets_and_requeues():
    rec, cluster, s, clock = setup()
    rec.fail_prebind.add("p")
    cluster.add_pod(make_pod("p", cpu="1"))
    await s.drain()
    assert [c[0] for c in rec.calls] == ["reserve", "permit", "pre_bind", "unreserve"]
    assert cluster.node_of("p") is None and s.cache.nodes["n"].req_cpu == 0
    rec.fail_prebind.clear()
    clock.advance(2)
    s.queue.flush_backoff_completed()
    await s.drain()
    assert cluster.node_of("p") == "n"


async def test_permit_wait_holds_the_bind_until_allowed_and_the_space_stays_taken():
    rec, cluster, s, _ = setup()
    rec.wait = 30.0
    cluster.add_pod(make_pod("p", cpu="1"))
    qp = s.queue.pop_nowait()
    await s.schedule_one(qp)
    await asyncio.sleep(0)
    fw = s.frameworks["default-scheduler"]
    uid = qp.pod_info.uid
    assert uid in fw.waiting and cluster.node_of("p") is None and s.cache.nodes["n"].req_cpu == 1000
    cluster.add_pod(make_pod("q", cpu="1"))
    await s.schedule_one(s.queue.pop_nowait())  # no room: p holds the node while it waits
    assert cluster.node_of("q") is None
    assert fw.allow_waiting_pod(uid)
    await s.drain()
    assert cluster.node_of("p") == "n"


async def test_permit_rejection_releases_the_node():
    rec, cluster, s, _ = setup()
    rec.wait = 30.0
    cluster.add_pod(make_pod("p", cpu="1"))
    qp = s.queue.pop_nowait()
    await s.schedule_one(qp)
    await asyncio.sleep(0)
    s.frameworks["default-scheduler"].allow_waiting_pod(qp.pod_info.uid,
                                                        Status(Code.UNSCHEDULABLE, ("no quorum",)))
    await s.drain()
    assert cluster.node_of("p") is None and s.cache.nodes["n"].req_cpu == 0
    assert ("unreserve", "p", "n") in rec.calls
    assert "no quorum" in cluster.events_for("p", "FailedScheduling")[0]["message"]
