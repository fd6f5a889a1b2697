"""Pod-spec fields under `nodeagent up` with the machine's kubectl (issue 20 item 3): each either works as on
Kubernetes (seen from inside the container) or is refused with Kubernetes' reason.

One cluster for the module (the `cluster` fixture of test_node_up: private data dir, socket, bridge and cgroup
root); every test deletes its pods and checks nothing of them is left.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from tests.e2e.kubelet import test_node_up
from tests.e2e.kubelet.test_node_up import BUSYBOX, Cluster, _assert_pod_gone, _delete, _running

cluster = test_node_up.cluster  # the module's own `nodeagent up` (the fixture, registered by its name)

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


def _pod(name: str, containers: list[dict], **spec) -> dict:
    for c in containers:
        c.setdefault("image", BUSYBOX)
        c.setdefault("imagePullPolicy", "Never")
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, "containers": containers, **spec}}


def _sleeper(name: str = "c", **kw) -> dict:
    return {"name": name, "command": ["sleep", "3600"], **kw}


def _exec(c: Cluster, pod: str, *cmd: str, container: str = "") -> str:
    return c.kubectl("exec", pod, *(["-c", container] if container else []), "--", *cmd)


def _finish(c: Cluster, *names: str) -> None:
    """Delete the test's pods, then prove nothing of any of them is left."""
    pods = [_delete(c, name)[0] for name in names]
    for pod in pods:
        for attempt in range(10):
            try:
                _assert_pod_gone(c, pod)
                break
            except FileNotFoundError:  # another pod's cgroup went away under the check's directory walk
                if attempt == 9:
                    raise
                time.sleep(0.3)


def test_host_aliases_are_in_the_kubelets_hosts_file(cluster):
    c = cluster
    c.apply(_pod("aliases", [_sleeper()], hostname="web", subdomain="sub",
                 hostAliases=[{"ip": "10.1.2.3", "hostnames": ["foo.remote", "bar.remote"]}]))
    pod = c.wait_pod("aliases", _running)
    hosts = _exec(c, "aliases", "cat", "/etc/hosts")
    ip = pod["status"]["podIP"]
    assert hosts.startswith("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n")
    assert f"{ip}\tweb.sub.default.svc.cluster.local\tweb\n" in hosts
    assert hosts.endswith("\n# Entries added by HostAliases.\n10.1.2.3\tfoo.remote\tbar.remote\n")
    _finish(c, "aliases")


def test_fs_group_owns_volumes_and_joins_the_processes_groups(cluster):
    c = cluster
    c.apply(_pod("fsgroup", [_sleeper(volumeMounts=[{"name": "data", "mountPath": "/data"}],
                                      securityContext={"allowPrivilegeEscalation": False})],
                 securityContext={"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000,
                                  "supplementalGroups": [4000]},
                 volumes=[{"name": "data", "emptyDir": {}}]))
    c.wait_pod("fsgroup", _running)
    ids = _exec(c, "fsgroup", "id").strip()
    uid, gid, groups = ids.split(" ")
    assert uid.startswith("uid=1000") and gid == "gid=3000", ids
    assert {"2000", "4000"} <= {g.split("(")[0] for g in groups.removeprefix("groups=").split(",")}, ids
    out = _exec(c, "fsgroup", "sh", "-c", "touch /data/f && stat -c '%g %A' /data /data/f").split("\n")
    assert out[0].split()[0] == "2000" and out[0].split()[1][6] == "s", out  # group 2000, setgid
    assert out[1].split()[0] == "2000", out  # new files inherit the group
    status = _exec(c, "fsgroup", "grep", "NoNewPrivs", "/proc/self/status")
    assert status.split()[-1] == "1"
    _finish(c, "fsgroup")


def test_read_only_root_and_run_as_non_root(cluster):
    c = cluster
    c.apply(_pod("rofs", [_sleeper(securityContext={"readOnlyRootFilesystem": True,
                                                     "capabilities": {"drop": ["ALL"]}})]))
    c.apply(_pod("nonroot", [_sleeper()], securityContext={"runAsNonRoot": True}))
    c.wait_pod("rofs", _running)
    r = c.kubectl("exec", "rofs", "--", "touch", "/x", check=False)
    assert "Read-only file system" in r or r == "", r
    p = json.loads(c.kubectl("exec", "rofs", "--", "sh", "-c",
                             "echo \"[\\\"$(grep CapEff /proc/self/status | cut -f2)\\\"]\""))
    assert p == ["0000000000000000"]
    pod = c.wait_pod("nonroot", lambda p: "waiting" in ((p["status"].get("containerStatuses") or [{}])[0]
                                                         .get("state") or {}))
    waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "CreateContainerConfigError"
    assert waiting["message"].startswith("container has runAsNonRoot and image will run as root (pod: ")
    _finish(c, "rofs", "nonroot")


def test_termination_message_from_the_file_and_from_the_logs(cluster):
    c = cluster
    write = "echo -n bye > /dev/termination-log; exit 3"
    c.apply(_pod("tmsg", [{"name": "c", "command": ["sh", "-c", write]}],
                 restartPolicy="Never"))
    c.apply(_pod("tlog", [{"name": "c", "terminationMessagePolicy": "FallbackToLogsOnError",
                           "command": ["sh", "-c", "echo first; echo panic: boom >&2; exit 2"]}],
                 restartPolicy="Never"))
    for name, message, code in (("tmsg", "bye", 3), ("tlog", "first\npanic: boom\n", 2)):
        pod = c.wait_pod(name, lambda p: p["status"].get("phase") == "Failed")
        term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert (term["exitCode"], term.get("message")) == (code, message), term
    _finish(c, "tmsg", "tlog")


def test_active_deadline_fails_the_pod(cluster):
    c = cluster
    c.apply(_pod("deadline", [_sleeper()], activeDeadlineSeconds=3))
    pod = c.wait_pod("deadline", lambda p: p["status"].get("phase") == "Failed", timeout=30)
    assert pod["status"]["reason"] == "DeadlineExceeded"
    assert pod["status"]["message"] == "Pod was active on the node longer than the specified deadline"
    assert "DeadlineExceeded" in [e["reason"] for e in c.events("deadline")]
    _finish(c, "deadline")


@pytest.mark.parametrize(("name", "spec", "reason", "message"), [
    ("winpod", {"os": {"name": "windows"}}, "PodOSNotSupported",
     "Pod was rejected: Failed to admit pod as the OS field doesn't match node OS"),
    ("unsafe", {"securityContext": {"sysctls": [{"name": "net.core.somaxconn", "value": "1024"}]}},
     "SysctlForbidden", 'Pod was rejected: forbidden sysctl: "net.core.somaxconn" not allowlisted'),
])
def test_the_node_rejects_what_it_cannot_run(cluster, name, spec, reason, message):
    c = cluster
    c.apply(_pod(name, [_sleeper()], **spec))
    pod = c.wait_pod(name, lambda p: p["status"].get("phase") == "Failed")
    assert (pod["status"]["reason"], pod["status"]["message"]) == (reason, message)
    assert reason in [e["reason"] for e in c.events(name)]
    _finish(c, name)


def test_safe_sysctls_are_set_in_the_pods_namespace(cluster):
    c = cluster
    c.apply(_pod("sysctl", [_sleeper()], securityContext={"sysctls": [
        {"name": "net.ipv4.ip_unprivileged_port_start", "value": "80"}]}))
    c.wait_pod("sysctl", _running)
    assert _exec(c, "sysctl", "cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start").strip() == "80"
    _finish(c, "sysctl")


def test_runtime_class_selects_the_handler(cluster):
    from cri.client import CRIClient

    c = cluster
    c.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "plain"},
        "handler": "runc",
        "overhead": {"podFixed": {"cpu": "10m", "memory": "16Mi"}}}))
    try:
        refused = c.kubectl("apply", "-f", "-", check=False,
                            input=json.dumps(_pod("norc", [_sleeper()], runtimeClassName="absent",
                                                  nodeName=c.node)))
        assert refused == ""
        c.apply(_pod("rc", [_sleeper()], runtimeClassName="plain"))
        pod = c.wait_pod("rc", _running)
        assert pod["spec"]["overhead"] == {"cpu": "10m", "memory": "16Mi"}
        cri = CRIClient(str(c.data_dir / "cri.sock"))
        try:
            (box,) = cri.list_pod_sandbox(label_selector={"io.kubernetes.pod.uid": pod["metadata"]["uid"]})
            assert box.runtime_handler == "runc"
        finally:
            cri.close()
        _finish(c, "rc")
    finally:
        c.kubectl("delete", "runtimeclass", "plain", check=False)


def test_native_sidecar_starts_first_and_keeps_running(cluster):
    c = cluster
    c.apply(_pod("sidecar", [{"name": "main", "volumeMounts": [{"name": "w", "mountPath": "/w"}],
                              "command": ["sh", "-c", "test -f /w/side || exit 3; exec sleep 3600"]}],
                 initContainers=[{"name": "side", "image": BUSYBOX, "imagePullPolicy": "Never",
                                  "restartPolicy": "Always",
                                  "volumeMounts": [{"name": "w", "mountPath": "/w"}],
                                  # the first run exits after a while, the restarted one stays
                                  "command": ["sh", "-c", "touch /w/side; "
                                              "test -f /w/again && exec sleep 3600; "
                                              "touch /w/again; sleep 3; exit 1"]}],
                 volumes=[{"name": "w", "emptyDir": {}}]))
    pod = c.wait_pod("sidecar", _running)
    side = pod["status"]["initContainerStatuses"][0]
    assert "running" in side["state"] and side["started"] is True
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0  # the sidecar was there first
    end = time.monotonic() + 40
    while True:  # restarted in place, as restartPolicy Always says
        side = c.pod("sidecar")["status"]["initContainerStatuses"][0]
        if side["restartCount"] >= 1 and "running" in side["state"]:
            break
        assert time.monotonic() < end, side
        time.sleep(0.3)
    _finish(c, "sidecar")


def test_kubectl_debug_adds_an_ephemeral_container_in_the_targets_pid_namespace(cluster):
    c = cluster
    c.apply(_pod("debugme", [_sleeper("app", command=["sleep", "4242"])]))
    c.wait_pod("debugme", _running)
    p = subprocess.Popen(["kubectl", "debug", "debugme", "-i", "--image", BUSYBOX,
                          "--image-pull-policy", "Never", "--target", "app", "--container", "dbg", "--",
                          "sh", "-c", "while read x; do ps -o args | grep '^sleep 424[2]'; done"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=c.env)
    assert p.stdin is not None and p.stdout is not None and p.stderr is not None
    try:
        line = p.stdout.readline()  # kubectl's own note comes first
        assert line.startswith('Targeting container "app"'), line
        p.stdin.write("ps\n")
        p.stdin.flush()
        line = p.stdout.readline()
        assert line == "sleep 4242\n", (line, p.stderr.read() if not line else "")  # the target's process
        p.stdin.close()
        assert p.wait(timeout=60) == 0, p.stderr.read()
    finally:
        p.kill()
        p.wait()
    pod = c.pod("debugme")
    (ec,) = pod["spec"]["ephemeralContainers"]
    assert (ec["name"], ec["targetContainerName"], ec["stdin"]) == ("dbg", "app", True)
    (st,) = pod["status"]["ephemeralContainerStatuses"]
    assert st["name"] == "dbg" and st["restartCount"] == 0 and st["ready"] is False
    _finish(c, "debugme")


def test_share_process_namespace_and_working_dir(cluster):
    c = cluster
    c.apply(_pod("sharepid", [_sleeper("a", command=["sleep", "777"]), _sleeper("b", workingDir="/tmp")],
                 shareProcessNamespace=True))
    c.wait_pod("sharepid", _running)
    seen = _exec(c, "sharepid", "ps", "-o", "pid,args", container="b")
    assert "sleep 777" in seen, seen  # a's process, from b
    assert seen.splitlines()[1].split()[0] == "1" and "pause" in seen.splitlines()[1], seen  # pause is init
    assert _exec(c, "sharepid", "pwd", container="b").strip() == "/tmp"
    _finish(c, "sharepid")
