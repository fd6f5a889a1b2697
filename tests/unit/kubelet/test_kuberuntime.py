"""One pod's sync and kill against a fake CRI server: what the kubelet asks the runtime, in which order."""

import asyncio
from pathlib import Path

import pytest

from cri.proto import api_pb2 as pb
from kernel.testing import RecordingSyscalls
from nodeagent.kubelet.kuberuntime import PodRuntime
from nodeagent.kubelet.volumes.manager import VolumeManager
from nodeagent.testing.clock import FakeClock
from nodeagent.testing.fake_cri import FakeRuntime, serve

IMG = "localhost/busybox:latest"


class Recorder:
    def __init__(self):
        self.events = []

    def record(self, obj, type_, reason, message):
        self.events.append((type_, reason, message))

    def reasons(self):
        return [r for _, r, _ in self.events]


def _pod(containers, init=(), uid="u1", **spec):
    return {"metadata": {"name": "p", "namespace": "default", "uid": uid},
            "spec": {"containers": list(containers), "initContainers": list(init), **spec}, "status": {}}


def _c(name, **kw):
    return {"name": name, "image": IMG, "imagePullPolicy": "IfNotPresent", **kw}


@pytest.fixture
async def rt(tmp_path: Path):
    clock = FakeClock(1_700_000_000.0)
    cri = FakeRuntime(images=(IMG,), clock=clock)
    rec = Recorder()
    async with serve(cri) as client:
        vm = VolumeManager(tmp_path / "kubelet", sc=RecordingSyscalls())
        r = PodRuntime(client, vm, rec, clock, log_root=tmp_path / "logs",
                       cgroup_root=("inst",), memory_capacity=8 << 30, runtime_name="fake")
        yield r, cri, rec, clock


async def test_sandbox_then_init_containers_one_at_a_time_then_apps(rt):
    r, cri, rec, clock = rt
    pod = _pod([_c("app")], init=[_c("init1"), _c("init2")])
    st = await r.sync(pod)
    assert [c for c in cri.calls if c[0] != "PullImage"] == [
        ("RunPodSandbox", "p"), ("CreateContainer", "init1"), ("StartContainer", "init1")]
    cfg = next(iter(cri.sandbox_configs.values()))
    assert cfg.linux.cgroup_parent == "/inst/kubepods/besteffort/podu1"
    assert cfg.labels["io.kubernetes.pod.uid"] == "u1"
    assert st.pod_ips == ["10.0.0.2"]
    status = r.pod_status(pod, st, ["192.0.2.1"])
    assert status["phase"] == "Pending" and status["podIP"] == "10.0.0.2" and status["hostIP"] == "192.0.2.1"

    await r.sync(pod)  # init1 still running: nothing new
    assert sum(1 for c in cri.calls if c[0] == "StartContainer") == 1
    cri.exit(cri.running("init1")[0], 0)
    await r.sync(pod)
    assert cri.calls[-1] == ("StartContainer", "init2")
    cri.exit(cri.running("init2")[0], 0)
    st = await r.sync(pod)
    assert cri.calls[-1] == ("StartContainer", "app")
    status = r.pod_status(pod, st, [])
    assert status["phase"] == "Running"
    assert [s["state"]["terminated"]["reason"] for s in status["initContainerStatuses"]] == ["Completed"] * 2
    assert {"Pulled", "Created", "Started"} <= set(rec.reasons())


async def test_crashing_container_restarts_once_then_backs_off(rt):
    r, cri, rec, clock = rt
    pod = _pod([_c("boom")])
    await r.sync(pod)
    clock.advance(1)
    cri.exit(cri.running("boom")[0], 1)
    await r.sync(pod)  # first restart is immediate
    assert [c for c in cri.calls if c == ("StartContainer", "boom")] == [("StartContainer", "boom")] * 2
    clock.advance(1)
    cri.exit(cri.running("boom")[0], 1)
    st = await r.sync(pod)  # within the 10 s back-off: not started
    assert [c for c in cri.calls if c == ("StartContainer", "boom")] == [("StartContainer", "boom")] * 2
    status = r.pod_status(pod, st, [])
    s = status["containerStatuses"][0]
    assert s["state"]["waiting"]["reason"] == "CrashLoopBackOff" and s["restartCount"] == 1
    assert s["lastState"]["terminated"]["exitCode"] == 1
    assert "BackOff" in rec.reasons()
    clock.advance(11)
    st = await r.sync(pod)
    assert [c for c in cri.calls if c == ("StartContainer", "boom")] == [("StartContainer", "boom")] * 3
    assert ("RemoveContainer", "boom") not in cri.calls  # dead instances are container GC's
    s = r.pod_status(pod, st, [])["containerStatuses"][0]
    assert "running" in s["state"] and s["restartCount"] == 2
    assert s["lastState"]["terminated"]["exitCode"] == 1
    # container GC with kubelet's default policy: the oldest goes, the previous one stays for lastState
    from nodeagent.kubelet.gc.containers import ContainerGC, ContainerGCPolicy

    assert await ContainerGC(r.cri, ContainerGCPolicy(), clock, lambda: [pod]).collect() == (1, 0)
    assert [c for c in cri.calls if c == ("RemoveContainer", "boom")] == [("RemoveContainer", "boom")]
    s = r.pod_status(pod, await r.state(pod), [])["containerStatuses"][0]
    assert s["restartCount"] == 2 and s["lastState"]["terminated"]["exitCode"] == 1


async def test_image_pulled_per_policy_with_events(rt):
    r, cri, rec, clock = rt
    pod = _pod([_c("a", image="example.org/x:1", imagePullPolicy="IfNotPresent"),
                _c("b", imagePullPolicy="Always")])
    await r.sync(pod)
    pulls = [c[1] for c in cri.calls if c[0] == "PullImage"]
    assert pulls == ["example.org/x:1", IMG]
    assert rec.reasons().count("Pulling") == 2 and rec.reasons().count("Pulled") == 2


async def test_never_policy_without_the_image_is_reported_not_pulled(rt):
    r, cri, rec, clock = rt
    pod = _pod([_c("a", image="example.org/absent:1", imagePullPolicy="Never")])
    st = await r.sync(pod)
    assert not [c for c in cri.calls if c[0] in ("PullImage", "CreateContainer")]
    s = r.pod_status(pod, st, [])["containerStatuses"][0]
    assert s["state"]["waiting"]["reason"] == "ErrImageNeverPull"


async def test_guaranteed_limits_reach_the_container_config(rt):
    r, cri, rec, clock = rt
    pod = _pod([_c("a", resources={"limits": {"cpu": "250m", "memory": "128Mi"}})])
    await r.sync(pod)
    res = cri.last_config.linux.resources
    assert (res.cpu_quota, res.cpu_period, res.memory_limit_in_bytes, res.cpu_shares) == (
        25000, 100000, 128 << 20, 256)
    assert res.oom_score_adj == -997
    assert next(iter(cri.sandbox_configs.values())).linux.cgroup_parent == "/inst/kubepods/podu1"


async def test_kill_stops_with_the_grace_period_then_removes_everything(rt, tmp_path):
    r, cri, rec, clock = rt
    pod = _pod([_c("a"), _c("b")], volumes=[{"name": "scratch", "emptyDir": {}}])
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/s"}]
    await r.sync(pod)
    vol = tmp_path / "kubelet" / "pods" / "u1" / "volumes" / "kubernetes.io~empty-dir" / "scratch"
    assert vol.is_dir()
    pod["metadata"]["deletionGracePeriodSeconds"] = 7
    await r.kill(pod, 7)
    stops = [c[1] for c in cri.calls if c[0] == "StopContainer"]
    assert sorted(stops) == [("a", 7), ("b", 7)]
    assert not cri.containers and not cri.sandboxes
    assert not (tmp_path / "kubelet" / "pods" / "u1").exists()
    assert rec.reasons().count("Killing") == 2
    await r.kill(pod, 7)  # idempotent: nothing left is fine


async def test_volume_mounts_point_at_the_pod_volume_dirs(rt, tmp_path):
    r, cri, rec, clock = rt
    pod = _pod([_c("a", volumeMounts=[{"name": "scratch", "mountPath": "/s", "readOnly": True}])],
               volumes=[{"name": "scratch", "emptyDir": {}}])
    await r.sync(pod)
    (m,) = [m for m in cri.last_config.mounts if m.container_path != "/etc/hosts"]
    assert m.container_path == "/s" and m.readonly
    pod_dir = tmp_path / "kubelet" / "pods" / "u1"
    (hosts,) = [m for m in cri.last_config.mounts if m.container_path == "/etc/hosts"]
    assert hosts.host_path == str(pod_dir / "etc-hosts")
    assert m.host_path == str(pod_dir / "volumes" / "kubernetes.io~empty-dir" / "scratch")
    assert cri.last_config.annotations["io.kubernetes.container.hash"]
    assert isinstance(cri.last_config, pb.ContainerConfig)


async def test_image_volume_is_pulled_by_its_policy_and_mounted_by_the_runtime(rt):
    """volumes[].image (KEP-4639): the kubelet pulls the reference as its pullPolicy says and hands the
    runtime a CRI image mount naming the pulled image, read-only, with the volumeMount's subPath; an image
    volume no container mounts is not pulled."""
    r, cri, rec, clock = rt
    tools, other, unused = "localhost/tools:v1", "localhost/other:v2", "localhost/unused:v3"
    cri.images.add(other)
    pod = _pod([_c("a", volumeMounts=[{"name": "tools", "mountPath": "/tools", "subPath": "bin"},
                                      {"name": "other", "mountPath": "/x"}])],
               volumes=[{"name": "tools", "image": {"reference": tools, "pullPolicy": "IfNotPresent"}},
                        {"name": "other", "image": {"reference": other, "pullPolicy": "Never"}},
                        {"name": "unused", "image": {"reference": unused, "pullPolicy": "Always"}}])
    await r.sync(pod)
    cfg = cri.last_config
    assert cfg is not None
    first, second, hosts = cfg.mounts  # and the kubelet-managed /etc/hosts
    assert hosts.container_path == "/etc/hosts"
    assert (first.container_path, first.host_path, first.readonly) == ("/tools", "", True)
    assert (first.image.image, first.image_sub_path) == (f"sha256:{tools}", "bin")
    assert (second.image.image, second.image_sub_path, second.readonly) == (f"sha256:{other}", "", True)
    assert cri.calls.count(("PullImage", tools)) == 1
    assert ("PullImage", other) not in cri.calls and ("PullImage", unused) not in cri.calls


async def test_image_volume_pull_failure_is_err_image_pull(rt):
    r, cri, rec, clock = rt
    cri.unpullable.add("localhost/missing:v1")
    pod = _pod([_c("a", volumeMounts=[{"name": "v", "mountPath": "/v"}])],
               volumes=[{"name": "v",
                         "image": {"reference": "localhost/missing:v1", "pullPolicy": "Always"}}])
    await r.sync(pod)
    assert not any(c[0] == "CreateContainer" for c in cri.calls)
    assert r.sync_errors["u1"]["a"].reason == "ErrImagePull"
    assert "Failed" in rec.reasons()


async def test_lifecycle_hooks_run_around_start_and_stop(rt):
    r, cri, rec, clock = rt
    pod = _pod([_c("a", lifecycle={"postStart": {"exec": {"command": ["touch", "/started"]}},
                                   "preStop": {"exec": {"command": ["sh", "-c", "drain"]}}})])
    await r.sync(pod)
    i_start = cri.calls.index(("StartContainer", "a"))
    assert cri.calls[i_start + 1] == ("ExecSync", ("a", ("touch", "/started")))
    await r.kill(pod, 5)
    i_hook = cri.calls.index(("ExecSync", ("a", ("sh", "-c", "drain"))))
    assert cri.calls[i_hook + 1][0] == "StopContainer"


async def test_failed_post_start_hook_kills_the_container(rt):
    r, cri, rec, clock = rt
    cri.exec_results[("false",)] = 1
    pod = _pod([_c("a", lifecycle={"postStart": {"exec": {"command": ["false"]}}})])
    st = await r.sync(pod)
    assert "FailedPostStartHook" in rec.reasons()
    assert not cri.running("a")
    s = r.pod_status(pod, st, [])["containerStatuses"][0]
    assert "running" not in s["state"]


async def test_failed_pull_is_err_image_pull_then_image_pull_back_off(rt):
    r, cri, rec, clock = rt
    cri.unpullable.add("example.org/missing:1")
    pod = _pod([_c("a", image="example.org/missing:1")])
    st = await r.sync(pod)
    s = r.pod_status(pod, st, [])["containerStatuses"][0]
    assert s["state"]["waiting"]["reason"] == "ErrImagePull"
    st = await r.sync(pod)  # within the back-off: no new pull
    assert [c for c in cri.calls if c[0] == "PullImage"] == [("PullImage", "example.org/missing:1")]
    s = r.pod_status(pod, st, [])["containerStatuses"][0]
    assert s["state"]["waiting"]["reason"] == "ImagePullBackOff"
    clock.advance(11)
    await r.sync(pod)
    assert len([c for c in cri.calls if c[0] == "PullImage"]) == 2


async def test_changed_container_spec_restarts_the_container(rt):
    r, cri, rec, clock = rt
    cri.images.add("localhost/busybox:v2")
    pod = _pod([_c("a")])
    await r.sync(pod)
    first = cri.running("a")
    pod["spec"]["containers"][0]["image"] = "localhost/busybox:v2"  # the one mutable field that is hashed
    await r.sync(pod)
    assert any(m == "Container a definition changed, will be restarted" for _, _, m in rec.events)
    assert cri.running("a") and cri.running("a") != first
    assert cri.last_config.image.image == "localhost/busybox:v2"


async def test_http_and_sleep_hooks_as_kubelet_runs_them(rt):
    import socket

    from aiohttp import web

    r, cri, rec, clock = rt
    seen = []

    async def hook(request):
        seen.append((request.path, request.headers.get("User-Agent"), request.headers.get("X-Why")))
        return web.Response(status=500)  # any answer counts: kubelet only fails a hook it cannot send

    app = web.Application()
    app.router.add_get("/{tail:.*}", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    try:
        http = {"host": "127.0.0.1", "port": "web", "path": "/started",
                "httpHeaders": [{"name": "X-Why", "value": "postStart"}]}
        pod = _pod([_c("a", ports=[{"name": "web", "containerPort": port}],
                       lifecycle={"postStart": {"httpGet": http}, "preStop": {"sleep": {"seconds": 0}}})])
        await r.sync(pod)
        assert seen == [("/started", "kube-lifecycle/1.32", "postStart")]
        assert cri.running("a") and "FailedPostStartHook" not in rec.reasons()
        await r.kill(pod, 5)

        bad = _pod([_c("b", lifecycle={"postStart": {"httpGet": {"host": "127.0.0.1", "port": closed}}})],
                   uid="u2")
        await r.sync(bad)
        assert "FailedPostStartHook" in rec.reasons() and not cri.running("b")
    finally:
        await runner.cleanup()


async def test_run_as_non_root_against_a_root_image_is_a_config_error(rt):
    r, cri, rec, clock = rt
    pod = _pod([_c("a")], securityContext={"runAsNonRoot": True})
    await r.sync(pod)
    assert not [c for c in cri.calls if c[0] == "CreateContainer"]
    err = r.sync_errors["u1"]["a"]
    assert err.reason == "CreateContainerConfigError"
    assert err.message == ('container has runAsNonRoot and image will run as root '
                           '(pod: "p_default(u1)", container: a)')
    assert ("Warning", "Failed", f"Error: {err.message}") in rec.events
    cri.image_users[IMG] = "1000"
    await r.sync(pod)
    assert cri.running("a")


async def test_security_context_and_sysctls_reach_the_runtime(rt):
    r, cri, rec, clock = rt
    pod = _pod([_c("a", securityContext={"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                                         "capabilities": {"drop": ["ALL"]}})],
               securityContext={"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000,
                                "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]})
    await r.sync(pod)
    lsc = cri.last_config.linux.security_context
    ids = (lsc.run_as_user.value, lsc.run_as_group.value, list(lsc.supplemental_groups))
    assert ids == (1000, 3000, [2000])
    assert lsc.readonly_rootfs and lsc.no_new_privs and list(lsc.capabilities.drop_capabilities) == ["ALL"]
    sandbox = next(iter(cri.sandbox_configs.values()))
    assert dict(sandbox.linux.sysctls) == {"net.ipv4.ip_unprivileged_port_start": "0"}


async def test_termination_message_file_is_mounted_and_read_back(rt, tmp_path):
    r, cri, rec, clock = rt
    pod = _pod([_c("a", terminationMessagePath="/dev/termination-log")], restartPolicy="Never",
               hostAliases=[{"ip": "10.9.9.9", "hostnames": ["db"]}])
    await r.sync(pod)
    mounts = {m.container_path: m.host_path for m in cri.last_config.mounts}
    hosts = await asyncio.to_thread(Path(mounts["/etc/hosts"]).read_text)
    assert "10.9.9.9\tdb\n" in hosts
    await asyncio.to_thread(Path(mounts["/dev/termination-log"]).write_text, "all done")
    (cid,) = cri.running("a")
    cri.exit(cid, 3)
    st = await r.sync(pod)
    (rec_a,) = [x for x in st.records if x.name == "a"]
    assert rec_a.message == "all done"
    status = r.pod_status(pod, st, [])
    assert status["containerStatuses"][0]["state"]["terminated"]["message"] == "all done"


async def test_fallback_to_logs_on_error_reads_the_log_tail(rt, tmp_path):
    r, cri, rec, clock = rt
    pod = _pod([_c("a", terminationMessagePath="/dev/termination-log",
                   terminationMessagePolicy="FallbackToLogsOnError")], restartPolicy="Never")
    await r.sync(pod)
    (cid,) = cri.running("a")
    log = tmp_path / "a.log"
    await asyncio.to_thread(log.write_text, "2024-01-01T00:00:00Z stderr F panic: boom\n")
    cri.containers[cid].log_path = str(log)
    cri.exit(cid, 2)
    st = await r.sync(pod)
    assert [x.message for x in st.records if x.name == "a"] == ["panic: boom\n"]


async def test_ephemeral_container_starts_once_in_its_targets_pid_namespace(rt):
    r, cri, rec, clock = rt
    pod = _pod([_c("app")])
    await r.sync(pod)
    (app_id,) = cri.running("app")
    pod["spec"]["ephemeralContainers"] = [_c("dbg", targetContainerName="app", stdin=True, tty=True)]
    st = await r.sync(pod)
    nso = cri.last_config.linux.security_context.namespace_options
    assert cri.last_config.metadata.name == "dbg" and cri.last_config.stdin and cri.last_config.tty
    assert (nso.pid, nso.target_id) == (pb.TARGET, app_id)
    status = r.pod_status(pod, st, [])
    (eph,) = status["ephemeralContainerStatuses"]
    assert eph["name"] == "dbg" and "running" in eph["state"] and eph["ready"] is False
    (dbg_id,) = cri.running("dbg")
    cri.exit(dbg_id, 0)
    await r.sync(pod)
    assert [c for c in cri.calls if c == ("CreateContainer", "dbg")] == [("CreateContainer", "dbg")]  # once


async def test_host_users_false_is_refused_at_sandbox_creation(rt):
    r, cri, rec, clock = rt
    await r.sync(_pod([_c("a")], hostUsers=False))
    assert not cri.sandboxes
    assert ("Warning", "FailedCreatePodSandBox",
            'Failed to create pod sandbox: RuntimeClass handler "" does not support user namespaces') \
        in rec.events


async def test_sidecars_stop_after_the_main_containers_last_declared_first(rt):
    r, cri, rec, clock = rt
    pod = _pod([_c("app")], init=[_c("s1", restartPolicy="Always"), _c("s2", restartPolicy="Always")])
    for _ in range(4):
        await r.sync(pod)
    assert cri.running("s1") and cri.running("s2") and cri.running("app")
    await r.kill(pod, 5)
    stops = [c[1][0] for c in cri.calls if c[0] == "StopContainer"]
    assert stops == ["app", "s2", "s1"]


@pytest.mark.parametrize(("spec", "container", "check"), [
    ({"hostNetwork": True}, {}, lambda s, c: s.linux.security_context.namespace_options.network == pb.NODE
     and c.linux.security_context.namespace_options.network == pb.NODE and s.hostname == ""),
    ({"hostPID": True}, {}, lambda s, c: s.linux.security_context.namespace_options.pid == pb.NODE
     and c.linux.security_context.namespace_options.pid == pb.NODE),
    ({"shareProcessNamespace": True}, {},
     lambda s, c: s.linux.security_context.namespace_options.pid == pb.POD
     and c.linux.security_context.namespace_options.pid == pb.POD),
    ({}, {}, lambda s, c: c.linux.security_context.namespace_options.pid == pb.CONTAINER
     and c.linux.security_context.namespace_options.ipc == pb.POD and s.hostname == "p"),
    ({"hostIPC": True}, {}, lambda s, c: c.linux.security_context.namespace_options.ipc == pb.NODE),
    ({"hostname": "h"}, {}, lambda s, c: s.hostname == "h"),
    ({}, {"workingDir": "/srv", "command": ["sh"], "args": ["-c", "x"]},
     lambda s, c: c.working_dir == "/srv" and list(c.command) == ["sh"] and list(c.args) == ["-c", "x"]),
    ({}, {"stdin": True, "stdinOnce": True, "tty": True}, lambda s, c: c.stdin and c.stdin_once and c.tty),
    ({}, {"ports": [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}]},
     lambda s, c: [(m.container_port, m.host_port) for m in s.port_mappings] == [(80, 8080)]),
])
async def test_pod_fields_reach_the_cri_configs(rt, spec, container, check):
    r, cri, rec, clock = rt
    await r.sync(_pod([_c("a", **container)], **spec))
    assert check(next(iter(cri.sandbox_configs.values())), cri.last_config)

