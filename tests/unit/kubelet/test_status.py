from nodeagent.api.times import rfc3339
from nodeagent.kubelet.status import (
    ContainerRecord,
    SyncError,
    container_hash,
    generate_pod_status,
    pod_phase,
    terminated_reason,
)
from tests.unit.kubelet.podspecs import container, pod

NOW = 1_700_000_000.0


def rec(name, state, attempt=0, exit_code=0, created=None, reason="", cid=None):
    created = NOW + attempt if created is None else created
    return ContainerRecord(name=name, id=cid or f"{name}-{attempt}", state=state, attempt=attempt,
                           created_at=created, started_at=created,
                           finished_at=created + 0.5 if state == "exited" else 0,
                           exit_code=exit_code, reason=reason, image="busybox", image_id="sha256:abc")


def cond(status, type_):
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_no_containers_yet_is_pending_and_creating():
    st = generate_pod_status(pod(container("a")), [], now=NOW)
    assert st["phase"] == "Pending"
    assert st["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    assert st["qosClass"] == "BestEffort"
    assert st["startTime"] == rfc3339(NOW)
    assert cond(st, "PodScheduled")["status"] == "True"
    assert cond(st, "ContainersReady") == {
        "type": "ContainersReady", "status": "False", "reason": "ContainersNotReady",
        "message": "containers with unready status: [a]", "lastProbeTime": None,
        "lastTransitionTime": rfc3339(NOW)}


def test_running_and_ready():
    p = pod(container("a"), container("b"))
    st = generate_pod_status(p, [rec("a", "running"), rec("b", "running")], now=NOW, pod_ips=["10.1.0.5"],
                             host_ips=["192.168.1.2"], sandbox_ready=True)
    assert st["phase"] == "Running"
    assert [c["type"] for c in st["conditions"]] == ["PodReadyToStartContainers", "Initialized", "Ready",
                                                     "ContainersReady", "PodScheduled"]
    assert all(c["status"] == "True" for c in st["conditions"])
    a = st["containerStatuses"][0]
    assert a["ready"] and a["started"] and a["containerID"] == "containerd://a-0"
    assert a["state"] == {"running": {"startedAt": rfc3339(NOW)}}
    assert st["podIP"] == "10.1.0.5" and st["podIPs"] == [{"ip": "10.1.0.5"}]
    assert st["hostIP"] == "192.168.1.2"


def test_readiness_probe_result_drives_ready():
    p = pod(container("a"))
    st = generate_pod_status(p, [rec("a", "running")], now=NOW, ready={"a": False})
    assert cond(st, "Ready")["status"] == "False"
    assert cond(st, "Ready")["message"] == "containers with unready status: [a]"
    assert st["phase"] == "Running"


def test_startup_not_done_means_not_ready():
    st = generate_pod_status(pod(container("a")), [rec("a", "running")], now=NOW, started={"a": False})
    c = st["containerStatuses"][0]
    assert not c["started"] and not c["ready"]


def test_last_transition_time_kept_when_status_unchanged():
    p = pod(container("a"))
    st1 = generate_pod_status(p, [rec("a", "running")], now=NOW)
    p["status"] = st1
    st2 = generate_pod_status(p, [rec("a", "running")], now=NOW + 100, ready={"a": False})
    assert cond(st2, "Initialized")["lastTransitionTime"] == rfc3339(NOW)
    assert cond(st2, "Ready")["lastTransitionTime"] == rfc3339(NOW + 100)
    assert st2["startTime"] == rfc3339(NOW)


def test_crash_loop_back_off_state():
    p = pod(container("a"))
    recs = [rec("a", "exited", attempt=0, exit_code=1), rec("a", "exited", attempt=1, exit_code=2)]
    st = generate_pod_status(p, recs, now=NOW,
                             sync_errors={"a": SyncError("CrashLoopBackOff",
                                                         "back-off 10s restarting failed")})
    a = st["containerStatuses"][0]
    assert a["state"] == {
        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting failed"}}
    assert a["lastState"]["terminated"]["exitCode"] == 2
    assert a["lastState"]["terminated"]["reason"] == "Error"
    assert a["restartCount"] == 1
    assert st["phase"] == "Running"  # restartPolicy Always: restarting


def test_oom_killed_reason_passes_through():
    st = generate_pod_status(pod(container("a"), restartPolicy="Never"),
                             [rec("a", "exited", exit_code=137, reason="OOMKilled")], now=NOW)
    assert st["containerStatuses"][0]["state"]["terminated"]["reason"] == "OOMKilled"
    assert st["phase"] == "Failed"
    assert cond(st, "Ready")["reason"] == "PodFailed"


def test_image_pull_errors_are_waiting():
    for reason in ("ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError"):
        st = generate_pod_status(pod(container("a")), [], now=NOW, sync_errors={"a": SyncError(reason, "m")})
        assert st["containerStatuses"][0]["state"] == {"waiting": {"reason": reason, "message": "m"}}
        assert st["phase"] == "Pending"


def test_sync_error_ignored_for_container_that_will_not_restart():
    st = generate_pod_status(pod(container("a"), restartPolicy="Never"), [rec("a", "exited", exit_code=0)],
                             now=NOW, sync_errors={"a": SyncError("CrashLoopBackOff")})
    assert st["containerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert st["phase"] == "Succeeded"
    assert cond(st, "ContainersReady")["reason"] == "PodCompleted"


def test_phases_by_restart_policy():
    ok, bad = rec("a", "exited", exit_code=0), rec("a", "exited", exit_code=1)
    for policy, r, want in [("Always", ok, "Running"), ("Always", bad, "Running"),
                            ("OnFailure", ok, "Succeeded"),
                            ("OnFailure", bad, "Running"), ("Never", ok, "Succeeded"),
                            ("Never", bad, "Failed")]:
        st = generate_pod_status(pod(container("a"), restartPolicy=policy), [r], now=NOW)
        assert st["phase"] == want, (policy, r.exit_code)


def test_terminal_pod_phase():
    st = generate_pod_status(pod(container("a")), [rec("a", "exited", exit_code=0)], now=NOW,
                             pod_is_terminal=True)
    assert st["phase"] == "Succeeded"
    st = generate_pod_status(pod(container("a")), [rec("a", "exited", exit_code=143)], now=NOW,
                             pod_is_terminal=True)
    assert st["phase"] == "Failed"


def test_terminal_phase_is_never_left():
    p = pod(container("a"))
    p["status"] = {"phase": "Failed", "reason": "Evicted",
                   "message": "The node was low on resource: memory. "}
    st = generate_pod_status(p, [rec("a", "running")], now=NOW)
    assert st["phase"] == "Failed" and st["reason"] == "Evicted"


def test_init_containers():
    p = pod(container("app"), init=[container("i1"), container("i2")])
    st = generate_pod_status(p, [rec("i1", "running")], now=NOW)
    assert st["phase"] == "Pending"
    assert st["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert st["initContainerStatuses"][1]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert cond(st, "Initialized") == {**cond(st, "Initialized"), "status": "False",
                                       "reason": "ContainersNotInitialized",
                                       "message": "containers with incomplete status: [i1 i2]"}
    st = generate_pod_status(p, [rec("i1", "exited"), rec("i2", "exited"), rec("app", "running")], now=NOW)
    assert st["phase"] == "Running" and cond(st, "Initialized")["status"] == "True"


def test_failing_init_container():
    p = pod(container("app"), init=[container("i1")], restartPolicy="Never")
    st = generate_pod_status(p, [rec("i1", "exited", exit_code=3)], now=NOW)
    assert st["phase"] == "Failed"
    p = pod(container("app"), init=[container("i1")])
    st = generate_pod_status(p, [rec("i1", "exited", exit_code=3)], now=NOW,
                             sync_errors={"i1": SyncError("CrashLoopBackOff", "back-off")})
    assert st["phase"] == "Pending"
    assert st["initContainerStatuses"][0]["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert st["initContainerStatuses"][0]["lastState"]["terminated"]["exitCode"] == 3


def test_sidecar_must_start_before_pod_initialized():
    side = container("s", restartPolicy="Always")
    p = pod(container("app"), init=[side])
    st = generate_pod_status(p, [rec("s", "running")], now=NOW, started={"s": False})
    assert st["phase"] == "Pending" and cond(st, "Initialized")["status"] == "False"
    st = generate_pod_status(p, [rec("s", "running"), rec("app", "running")], now=NOW)
    assert st["phase"] == "Running" and cond(st, "Ready")["status"] == "True"


def test_readiness_gates():
    p = pod(container("a"), readinessGates=[{"conditionType": "example.com/lb"}])
    st = generate_pod_status(p, [rec("a", "running")], now=NOW)
    assert cond(st, "Ready")["reason"] == "ReadinessGatesNotReady"
    assert cond(st, "Ready")["message"] == (
        'corresponding condition of pod readiness gate "example.com/lb" does not exist.')
    assert cond(st, "ContainersReady")["status"] == "True"
    p["status"] = {"conditions": [{"type": "example.com/lb", "status": "False"}]}
    st = generate_pod_status(p, [rec("a", "running")], now=NOW)
    assert cond(st, "Ready")["message"] == (
        'the status of pod readiness gate "example.com/lb" is not "True", but False')
    assert cond(st, "example.com/lb")["status"] == "False"  # kept: not the kubelet's
    p["status"] = {"conditions": [{"type": "example.com/lb", "status": "True"}]}
    assert cond(generate_pod_status(p, [rec("a", "running")], now=NOW), "Ready")["status"] == "True"


def test_lost_running_container_is_status_unknown():
    p = pod(container("a"))
    p["status"] = generate_pod_status(p, [rec("a", "running")], now=NOW)
    st = generate_pod_status(p, [], now=NOW)
    assert st["containerStatuses"][0]["state"]["terminated"]["reason"] == "ContainerStatusUnknown"


def test_pod_phase_unknown_container_is_pending():
    p = pod(container("a"), container("b"))
    assert pod_phase(p, [], [{"name": "a", "state": {"running": {}}}]) == "Pending"


def test_terminated_reason():
    assert terminated_reason(0) == "Completed"
    assert terminated_reason(1) == "Error"
    assert terminated_reason(137, oom_killed=True) == "OOMKilled"


def test_container_hash_changes_with_image_only():
    c = container("a")
    h = container_hash(c)
    assert h == container_hash(dict(c))
    assert h != container_hash(dict(c, image="busybox:2"))
    assert h != container_hash(dict(c, name="b"))
    assert h == container_hash(dict(c, resources={"limits": {"cpu": "1"}}))
    assert 0 <= h < 2**32


def test_restarting_sidecar_does_not_send_initialized_pod_back_to_pending():
    side = container("s", restartPolicy="Always")
    p = pod(container("app"), init=[side])
    # the sidecar restarted and its startup probe has not passed yet; the app container already ran
    recs = [rec("s", "running", attempt=1), rec("app", "running")]
    st = generate_pod_status(p, recs, now=NOW, started={"s": False})
    assert st["phase"] == "Running"
    # before any regular container ran, the same sidecar state keeps the pod Pending
    st = generate_pod_status(p, [rec("s", "running")], now=NOW, started={"s": False})
    assert st["phase"] == "Pending"


def test_created_container_is_waiting_without_reason():
    st = generate_pod_status(pod(container("a")), [rec("a", "created")], now=NOW)
    assert st["containerStatuses"][0]["state"] == {"waiting": {}}
    assert st["containerStatuses"][0]["containerID"] == "containerd://a-0"
    assert st["phase"] == "Pending"


def test_succeeded_pod_never_turns_failed():
    p = pod(container("a"), restartPolicy="Never")
    p["status"] = {"phase": "Succeeded"}
    st = generate_pod_status(p, [rec("a", "exited", exit_code=1)], now=NOW)
    assert st["phase"] == "Succeeded"


def test_should_restart_container():
    from nodeagent.kubelet.status import should_restart_container

    c = container("a")
    ok, bad = rec("a", "exited", exit_code=0), rec("a", "exited", exit_code=1)
    assert should_restart_container(pod(c), c, None)
    assert not should_restart_container(pod(c), c, rec("a", "running"))
    assert should_restart_container(pod(c, restartPolicy="Never"), c, rec("a", "created"))
    assert should_restart_container(pod(c), c, ok)
    assert not should_restart_container(pod(c, restartPolicy="OnFailure"), c, ok)
    assert should_restart_container(pod(c, restartPolicy="OnFailure"), c, bad)
    assert not should_restart_container(pod(c, restartPolicy="Never"), c, bad)
    assert not should_restart_container(pod(c), c, ok, is_init=True)  # a finished init container stays done
    side = container("s", restartPolicy="Always")
    assert should_restart_container(pod(c, restartPolicy="Never"), side, ok, is_init=True)
    deleting = pod(c)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not should_restart_container(deleting, c, bad)
