from nodeagent.kubelet.pleg import EventType, GenericPLEG, PodLifecycleEvent, Record, diff
from nodeagent.testing.clock import FakeClock

S, D, R, C = (EventType.CONTAINER_STARTED, EventType.CONTAINER_DIED, EventType.CONTAINER_REMOVED,
              EventType.CONTAINER_CHANGED)


def ev(t, cid, uid="p1"):
    return PodLifecycleEvent(uid, t, cid)


def test_no_change_no_events():
    recs = [Record("p1", "c1", "running")]
    assert diff(recs, list(recs)) == []


def test_started_died_removed():
    assert diff([], [Record("p1", "c1", "running")]) == [ev(S, "c1")]
    assert diff([Record("p1", "c1", "running")], [Record("p1", "c1", "exited")]) == [ev(D, "c1")]
    assert diff([Record("p1", "c1", "exited")], []) == [ev(R, "c1")]


def test_running_container_vanishing_dies_then_is_removed():
    assert diff([Record("p1", "c1", "running")], []) == [ev(D, "c1"), ev(R, "c1")]


def test_created_is_changed():
    assert diff([], [Record("p1", "c1", "created")]) == [ev(C, "c1")]
    assert diff([Record("p1", "c1", "created")], [Record("p1", "c1", "CONTAINER_RUNNING")]) == [ev(S, "c1")]


def test_new_then_exited_within_one_period_reports_died():
    assert diff([], [Record("p1", "c1", "exited")]) == [ev(D, "c1")]


def test_sandboxes_and_multiple_pods():
    old = [Record("p1", "sb1", "SANDBOX_READY"), Record("p2", "c2", "running")]
    new = [Record("p1", "sb1", "SANDBOX_NOTREADY"), Record("p2", "c2", "running"),
           Record("p2", "c3", "running")]
    assert diff(old, new) == [ev(D, "sb1"), ev(S, "c3", "p2")]


def test_relist_keeps_state_and_health():
    clock = FakeClock()
    pleg = GenericPLEG(clock)
    assert pleg.healthy() == (False, "pleg has yet to be successful")
    assert pleg.relist([Record("p1", "c1", "running")]) == [ev(S, "c1")]
    assert pleg.relist([Record("p1", "c1", "running")]) == []
    assert pleg.healthy() == (True, "")
    clock.advance(180)
    assert pleg.healthy()[0]
    clock.advance(0.5)
    ok, msg = pleg.healthy()
    assert not ok and msg == "pleg was last seen active 3m0.5s ago; threshold is 3m0s"
    assert pleg.relist([]) == [ev(D, "c1"), ev(R, "c1")]
    assert pleg.healthy()[0]
