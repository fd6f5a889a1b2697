from nodeagent.kubelet.pod_actions import SandboxRecord, compute_pod_actions, sandbox_changed
from nodeagent.kubelet.status import ContainerRecord, container_hash
from tests.unit.kubelet.podspecs import container, pod

READY = [SandboxRecord("sb1", True, 0, 1.0)]


def rec(c, state, attempt=0, exit_code=0, hash_=None):
    return ContainerRecord(c["name"], f"{c['name']}-{attempt}", state, attempt=attempt,
                           created_at=10.0 + attempt,
                           exit_code=exit_code, hash=container_hash(c) if hash_ is None else hash_)


def test_sandbox_changed():
    assert sandbox_changed([]) == (True, 0, "")
    assert sandbox_changed(READY) == (False, 0, "sb1")
    assert sandbox_changed([SandboxRecord("sb1", False, 2, 1.0)]) == (True, 3, "sb1")
    assert sandbox_changed([SandboxRecord("a", True, 0, 1.0), SandboxRecord("b", True, 1, 2.0)]) == (
        True, 2, "b")


def test_new_pod_creates_sandbox_and_starts_all():
    a, b = container("a"), container("b")
    act = compute_pod_actions(pod(a, b), [], [])
    assert act.create_sandbox and act.attempt == 0 and not act.kill_pod
    assert act.containers_to_start == ["a", "b"]


def test_new_pod_with_init_starts_first_init_only():
    act = compute_pod_actions(pod(container("a"), init=[container("i1"), container("i2")]), [], [])
    assert act.create_sandbox and act.init_containers_to_start == ["i1"] and act.containers_to_start == []


def test_dead_sandbox_is_recreated_and_old_killed():
    a = container("a")
    act = compute_pod_actions(pod(a), [SandboxRecord("sb1", False, 0, 1.0)], [rec(a, "exited", exit_code=1)])
    assert act.create_sandbox and act.kill_pod and act.attempt == 1 and act.containers_to_start == ["a"]
    # OnFailure: succeeded containers are not started again in the new sandbox
    b = container("b")
    act = compute_pod_actions(pod(a, b, restartPolicy="OnFailure"), [SandboxRecord("sb1", False, 0, 1.0)],
                              [rec(a, "exited", exit_code=0), rec(b, "exited", exit_code=2)])
    assert act.containers_to_start == ["b"]
    # Never: a finished pod is not given a new sandbox
    act = compute_pod_actions(pod(a, restartPolicy="Never"), [SandboxRecord("sb1", False, 0, 1.0)],
                              [rec(a, "exited")])
    assert act.kill_pod and not act.create_sandbox and not act.containers_to_start


def test_running_pod_keeps_everything():
    a = container("a")
    act = compute_pod_actions(pod(a), READY, [rec(a, "running")])
    assert not act.kill_pod and not act.containers_to_start and not act.containers_to_kill


def test_exited_container_restarts_by_policy():
    a, b = container("a"), container("b")
    recs = [rec(a, "running"), rec(b, "exited", exit_code=1)]
    assert compute_pod_actions(pod(a, b), READY, recs).containers_to_start == ["b"]
    assert compute_pod_actions(pod(a, b, restartPolicy="Never"), READY, recs).containers_to_start == []
    recs = [rec(a, "running"), rec(b, "exited", exit_code=0)]
    assert compute_pod_actions(pod(a, b, restartPolicy="OnFailure"), READY, recs).containers_to_start == []


def test_all_done_kills_pod():
    a = container("a")
    act = compute_pod_actions(pod(a, restartPolicy="Never"), READY, [rec(a, "exited", exit_code=0)])
    assert act.kill_pod and not act.containers_to_start


def test_hash_change_restarts():
    a = container("a")
    old = rec(a, "running", hash_=container_hash(dict(a, image="busybox:old")))
    act = compute_pod_actions(pod(a), READY, [old])
    assert act.containers_to_kill["a-0"].message == "Container a definition changed, will be restarted"
    assert act.containers_to_start == ["a"] and not act.kill_pod


def test_liveness_and_startup_failures():
    a = container("a")
    r = rec(a, "running")
    act = compute_pod_actions(pod(a), READY, [r], liveness_failed={"containerd://a-0"})
    assert act.containers_to_kill["a-0"].message == "Container a failed liveness probe, will be restarted"
    assert act.containers_to_kill["a-0"].reason == "LivenessProbe" and act.containers_to_start == ["a"]
    act = compute_pod_actions(pod(a, restartPolicy="Never"), READY, [r], startup_failed={"a-0"})
    assert act.containers_to_kill["a-0"].message == "Container a failed startup probe"
    assert act.containers_to_start == [] and act.kill_pod


def test_init_containers_in_order():
    i1, i2, a = container("i1"), container("i2"), container("a")
    p = pod(a, init=[i1, i2])
    assert compute_pod_actions(p, READY, [rec(i1, "running")]).init_containers_to_start == []
    act = compute_pod_actions(p, READY, [rec(i1, "exited")])
    assert act.init_containers_to_start == ["i2"] and act.containers_to_start == []
    act = compute_pod_actions(p, READY, [rec(i1, "exited"), rec(i2, "exited")])
    assert act.init_containers_to_start == [] and act.containers_to_start == ["a"]


def test_failed_init_container():
    i1, a = container("i1"), container("a")
    act = compute_pod_actions(pod(a, init=[i1]), READY, [rec(i1, "exited", exit_code=1)])
    assert act.init_containers_to_start == ["i1"] and not act.kill_pod
    act = compute_pod_actions(pod(a, init=[i1], restartPolicy="Never"), READY,
                              [rec(i1, "exited", exit_code=1)])
    assert act.init_failed and act.kill_pod and not act.init_containers_to_start


def test_sidecars():
    s, i, a = container("s", restartPolicy="Always"), container("i"), container("a")
    p = pod(a, init=[s, i])
    assert compute_pod_actions(p, READY, []).init_containers_to_start == ["s"]
    # the sidecar runs but its startup probe has not passed: wait
    act = compute_pod_actions(p, READY, [rec(s, "running")], started={"s": False})
    assert act.init_containers_to_start == [] and act.containers_to_start == []
    act = compute_pod_actions(p, READY, [rec(s, "running")], started={"s": True})
    assert act.init_containers_to_start == ["i"]
    act = compute_pod_actions(p, READY, [rec(s, "running"), rec(i, "exited")])
    assert act.containers_to_start == ["a"]
    # after initialization a crashed sidecar is restarted alongside the running app
    act = compute_pod_actions(p, READY, [rec(s, "exited", exit_code=1), rec(i, "exited"), rec(a, "running")])
    assert act.init_containers_to_start == ["s"] and not act.kill_pod
    # the app is done for good (Never): the sidecar does not keep the pod alive
    pn = pod(a, init=[s, i], restartPolicy="Never")
    act = compute_pod_actions(pn, READY, [rec(s, "running"), rec(i, "exited"), rec(a, "exited")])
    assert act.kill_pod and act.init_containers_to_start == []
