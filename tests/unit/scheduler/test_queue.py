"""The scheduling queue with a fake clock: ordering, backoff, event-driven moves, gates."""

from nodeagent.scheduler.framework import ActionType, ClusterEvent, ClusterEventWithHint, PodInfo
from nodeagent.scheduler.plugins.prioritysort import PrioritySort
from nodeagent.scheduler.plugins.schedulinggates import SchedulingGates
from nodeagent.scheduler.queue import ASSIGNED_POD_DELETE, SchedulingQueue
from nodeagent.testing.clock import FakeClock


def pod(name, priority=0, gates=()):
    spec = {"containers": [{"name": "c"}], "priority": priority}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return PodInfo({"metadata": {"name": name, "uid": name}, "spec": spec})


EVENTS = {
    "NodeResourcesFit": [ClusterEventWithHint(ClusterEvent("Pod", ActionType.DELETE)),
                         ClusterEventWithHint(ClusterEvent("Node", ActionType.ADD))],
    "TaintToleration": [ClusterEventWithHint(ClusterEvent("Node", ActionType.UPDATE_NODE_TAINT))],
    "NodeAffinity": [ClusterEventWithHint(ClusterEvent("Node", ActionType.UPDATE_NODE_LABEL),
                                          hint=lambda p, old, new: new.get("zone") == "z1")],
}


def make(clock):
    return SchedulingQueue(PrioritySort().sort_key, SchedulingGates().pre_enqueue, EVENTS, clock,
                           initial_backoff=1.0, max_backoff=10.0, max_unschedulable=300.0)


def drain(q):
    out = []
    while (qp := q.pop_nowait()) is not None:
        out.append(qp)
    return out


def park(q, qp, plugins, backoff=False):
    qp.unschedulable_plugins = set(plugins)
    q.add_unschedulable_if_not_present(qp, q.scheduling_cycle, backoff=backoff)


def test_active_queue_orders_by_priority_then_arrival():
    clock = FakeClock()
    q = make(clock)
    for name, prio in [("low1", 0), ("high", 100), ("low2", 0), ("mid", 50)]:
        q.add(pod(name, prio))
        clock.advance(0.1)
    assert [qp.pod_info.name for qp in drain(q)] == ["high", "mid", "low1", "low2"]


def test_backoff_doubles_from_one_second_up_to_ten():
    clock = FakeClock()
    q = make(clock)
    q.add(pod("p"))
    durations = []
    for _ in range(6):
        qp = q.pop_nowait()
        durations.append(q.backoff_duration(qp))
        park(q, qp, [], backoff=True)  # an error: straight to backoffQ
        assert q.where("p") == "backoff"
        clock.advance(durations[-1] - 0.01)
        assert q.flush_backoff_completed() == 0 and q.pop_nowait() is None
        clock.advance(0.02)
        assert q.flush_backoff_completed() == 1
    assert durations == [1, 2, 4, 8, 10, 10]


def test_unschedulable_pods_move_only_on_events_their_plugins_registered():
    clock = FakeClock()
    q = make(clock)
    q.add(pod("p"))
    park(q, q.pop_nowait(), ["NodeResourcesFit"])
    assert q.where("p") == "unschedulable"
    assert q.move_all_to_active_or_backoff(ClusterEvent("Node", ActionType.UPDATE_NODE_TAINT)) == 0
    assert q.where("p") == "unschedulable"
    # a pod deletion can free resources: the pod moves, to backoffQ while its backoff lasts
    assert q.move_all_to_active_or_backoff(ASSIGNED_POD_DELETE) == 1
    assert q.where("p") == "backoff"
    clock.advance(1.01)
    q.flush_backoff_completed()
    assert q.pop_nowait().pod_info.name == "p"


def test_moved_after_backoff_expired_goes_straight_to_active():
    clock = FakeClock()
    q = make(clock)
    q.add(pod("p"))
    park(q, q.pop_nowait(), ["TaintToleration"])
    clock.advance(5)
    q.move_all_to_active_or_backoff(ClusterEvent("Node", ActionType.UPDATE_NODE_TAINT))
    assert q.where("p") == "active"


def test_queueing_hints_filter_events():
    clock = FakeClock()
    q = make(clock)
    q.add(pod("p"))
    park(q, q.pop_nowait(), ["NodeAffinity"])
    ev = ClusterEvent("Node", ActionType.UPDATE_NODE_LABEL)
    assert q.move_all_to_active_or_backoff(ev, {}, {"zone": "z2"}) == 0
    assert q.move_all_to_active_or_backoff(ev, {}, {"zone": "z1"}) == 1


def test_event_during_the_cycle_sends_the_pod_to_backoff_not_the_pool():
    clock = FakeClock()
    q = make(clock)
    q.add(pod("p"))
    qp = q.pop_nowait()
    cycle = q.scheduling_cycle
    q.move_all_to_active_or_backoff(ClusterEvent("Node", ActionType.ADD))  # raced the cycle
    qp.unschedulable_plugins = {"NodeResourcesFit"}
    q.add_unschedulable_if_not_present(qp, cycle)
    assert q.where("p") == "backoff"


def test_scheduling_gates_hold_the_pod_until_its_update_clears_them():
    clock = FakeClock()
    q = make(clock)
    q.add(pod("g", gates=["example.com/wait"]))
    assert q.where("g") == "unschedulable" and q.pop_nowait() is None
    assert q.move_all_to_active_or_backoff(ClusterEvent("Node", ActionType.ADD)) == 0
    clock.advance(1000)
    assert q.flush_unschedulable_leftover() == 0
    q.update(pod("g", gates=["example.com/wait"]))
    assert q.pop_nowait() is None
    q.update(pod("g"))
    assert q.pop_nowait().pod_info.name == "g"


def test_leftover_unschedulable_pods_are_flushed_after_five_minutes():
    clock = FakeClock()
    q = make(clock)
    q.add(pod("p"))
    park(q, q.pop_nowait(), ["NodeResourcesFit"])
    clock.advance(299)
    assert q.flush_unschedulable_leftover() == 0
    clock.advance(2)
    assert q.flush_unschedulable_leftover() == 1 and q.where("p") == "active"


def test_deleted_pods_leave_every_structure():
    clock = FakeClock()
    q = make(clock)
    q.add(pod("a"))
    q.add(pod("b"))
    q.delete("a")
    assert [qp.pod_info.name for qp in drain(q)] == ["b"]
    q.add_nominated(pod("b", 5), "n1")
    assert [p.name for p in q.nominated_pods_for_node("n1")] == ["b"]
    q.delete("b")
    assert q.nominated_pods_for_node("n1") == []
    assert q.pending() == {"active": 0, "backoff": 0, "unschedulable": 0, "inflight": 0}


def test_priority_update_reorders_active_queue():
    clock = FakeClock()
    q = make(clock)
    q.add(pod("a", 1))
    clock.advance(1)
    q.add(pod("b", 1))
    q.update(pod("b", 10))
    assert [qp.pod_info.name for qp in drain(q)] == ["b", "a"]


def test_pods_rejected_without_known_plugins_move_on_any_event():
    clock = FakeClock()
    q = make(clock)
    q.add(pod("p"))
    park(q, q.pop_nowait(), [])
    assert q.where("p") == "unschedulable"
    clock.advance(2)
    assert q.move_all_to_active_or_backoff(ClusterEvent("Namespace", ActionType.ADD)) == 1
    assert q.where("p") == "active"
