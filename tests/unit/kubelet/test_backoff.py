from nodeagent.kubelet.backoff import Backoff, CrashLoopBackoff, ImagePullBackoff
from nodeagent.testing.clock import FakeClock
from tests.unit.kubelet.podspecs import container, pod


def test_doubles_to_five_minutes():
    clock = FakeClock()
    b = Backoff(clock=clock)
    delays = []
    for _ in range(8):
        delays.append(b.next("k", clock.now()))
        clock.advance(b.get("k"))
    assert delays == [10, 20, 40, 80, 160, 300, 300, 300]


def test_resets_after_ten_minutes_without_failure():
    clock = FakeClock()
    b = Backoff(clock=clock)
    for _ in range(4):
        b.next("k", clock.now())
    assert b.get("k") == 80
    clock.advance(600)  # exactly twice the max: not yet expired
    assert b.next("k", clock.now()) == 160
    clock.advance(600.5)
    assert b.next("k", clock.now()) == 10


def test_in_backoff_since_event_time():
    clock = FakeClock()
    b = Backoff(clock=clock)
    assert not b.in_backoff_since("k", clock.now())
    exited = clock.now()
    b.next("k", exited)
    clock.advance(9.9)
    assert b.in_backoff_since("k", exited)
    clock.advance(0.1)
    assert not b.in_backoff_since("k", exited)


def test_gc_drops_stale_entries():
    clock = FakeClock()
    b = Backoff(clock=clock)
    b.next("a", clock.now())
    clock.advance(500)
    b.next("b", clock.now())
    clock.advance(200)
    b.gc()
    assert b.get("a") == 0 and b.get("b") == 10


def test_crash_loop_sequence_and_message():
    clock = FakeClock()
    cl = CrashLoopBackoff(clock)
    c = container("app")
    p = pod(c, name="web", namespace="ns", uid="u1")
    # first exit: restart immediately and start a 10 s backoff
    assert not cl.check(p, c, clock.now()).in_backoff
    # it crashes again right away: the next restart must wait 10 s
    clock.advance(1)
    exited = clock.now()
    d = cl.check(p, c, exited)
    assert d.in_backoff and d.reason == "CrashLoopBackOff"
    assert d.message == "back-off 10s restarting failed container=app pod=web_ns(u1)"
    clock.advance(10)
    assert not cl.check(p, c, exited).in_backoff  # records the next failure: now 20 s
    clock.advance(1)
    d = cl.check(p, c, clock.now())
    assert d.message.startswith("back-off 20s ")
    for _ in range(6):
        cl.backoff.next(next(iter(cl.backoff._entries)), clock.now())
    d = cl.check(p, c, clock.now())
    assert d.message.startswith("back-off 5m0s ")


def test_changed_image_has_its_own_backoff():
    clock = FakeClock()
    cl = CrashLoopBackoff(clock)
    c = container("app")
    p = pod(c)
    cl.check(p, c, clock.now())
    assert cl.check(p, c, clock.now()).in_backoff
    c2 = dict(c, image="busybox:2")
    assert not cl.check(p, c2, clock.now()).in_backoff


def test_image_pull_backoff():
    clock = FakeClock()
    ib = ImagePullBackoff(clock)
    p = pod()
    assert not ib.check(p, "img").in_backoff
    assert ib.failed(p, "img") == 10
    d = ib.check(p, "img")
    assert d.in_backoff and d.reason == "ImagePullBackOff" and d.message == 'Back-off pulling image "img"'
    clock.advance(10)
    assert not ib.check(p, "img").in_backoff
    assert ib.failed(p, "img") == 20
    ib.succeeded(p, "img")
    assert not ib.check(p, "img").in_backoff


def test_container_that_ran_ten_minutes_starts_over():
    clock = FakeClock()
    cl = CrashLoopBackoff(clock)
    c = container("app")
    p = pod(c)
    waits = []
    for _ in range(5):  # crash-looping: each exit waits out the backoff, runs 1 s and exits again
        exited, waited = clock.now(), 0
        while cl.check(p, c, exited).in_backoff:
            clock.advance(1)
            waited += 1
        waits.append(waited)
        clock.advance(1)
    assert waits == [0, 10, 20, 40, 80]  # seconds from each exit to its restart
    assert cl.backoff.get(next(iter(cl.backoff._entries))) == 160
    clock.advance(601)  # then it ran for over 10 minutes before exiting again
    d = cl.check(p, c, clock.now())
    assert not d.in_backoff
    assert cl.backoff.get(next(iter(cl.backoff._entries))) == 10
