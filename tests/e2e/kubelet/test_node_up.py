"""`nodeagent up` on the real kernel, driven with the machine's kubectl (issue 7).

One cluster per module under a private data dir (own CRI socket, bridge, subnet, IPAM dir, cgroup root);
pods are bound by spec.nodeName (no scheduler needed). Each test deletes its pods and proves the runtime,
the kernel and the data dir hold nothing of them afterwards; the fixture stops `up` and proves the
bridge and the cgroup root are gone too.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from kernel.cgroups import hierarchies
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

BUSYBOX = "localhost/busybox:latest"
HTTPD = "localhost/httpd:v1"


class Cluster:
    def __init__(self, data_dir: Path, node: str, bridge: str) -> None:
        self.data_dir = data_dir
        self.node = node
        self.bridge = bridge
        self.proc: subprocess.Popen | None = None
        self.extra: list[str] = []
        self.ready_timeout = 60.0  # seconds until "kubelet: ready" (longer in the lab's emulated guests)
        self.manifest_url_file: Path | None = None  # the file --manifest-url serves, where given
        self.log = data_dir / "up.log"
        self.env = {**os.environ, "KUBECONFIG": str(data_dir / "admin.kubeconfig")}

    def start(self) -> None:
        mark = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "up",
                                          "--data-dir", str(self.data_dir),
                                          "--node-name", self.node, "--bridge", self.bridge,
                                          "--bind-address", "127.0.0.1", "--sync-frequency", "5",
                                          *self.extra],
                                         stdout=f, stderr=subprocess.STDOUT)
        end = time.monotonic() + self.ready_timeout
        while "kubelet: ready" not in self.log.read_bytes()[mark:].decode(errors="replace"):
            assert self.proc.poll() is None and time.monotonic() < end, self.tail()
            time.sleep(0.2)

    def shutdown(self) -> int:
        """Delete every pod, wait until the runtime holds none, then stop `up`; returns its exit status."""
        self.kubectl("delete", "pods", "--all", "--wait=true", "--timeout=90s", check=False)
        _wait_runtime_empty(self)
        return self.stop()

    def stop(self) -> int:
        """Ctrl-C, as a person stops `up`; returns its exit status."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        p = subprocess.run(["kubectl", *args], capture_output=True, text=True, env=self.env, input=input,
                           timeout=120)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {p.stderr}\n--- up log tail ---\n{self.tail()}")
        return p.stdout

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def apply(self, pod: dict) -> None:
        pod.setdefault("spec", {})["nodeName"] = self.node
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump(pod))

    def pod(self, name: str) -> dict:
        return json.loads(self.kubectl("get", "pod", name, "-o", "json"))

    def wait_pod(self, name: str, pred, timeout: float = 60) -> dict:
        end = time.monotonic() + timeout
        pod = {}
        while time.monotonic() < end:
            pod = self.pod(name)
            if pred(pod):
                return pod
            time.sleep(0.3)
        status = json.dumps(pod.get("status"), indent=1)
        raise AssertionError(f"pod {name} never matched; last status {status}\n"
                             f"--- up log tail ---\n{self.tail()}")

    def events(self, name: str) -> list[dict]:
        out = json.loads(self.kubectl("get", "events", "--field-selector", f"involvedObject.name={name}",
                                      "-o", "json"))
        return out["items"]

    def cgroup_root(self) -> str:
        from nodeagent.layout import Layout

        return Layout.for_data_dir(self.data_dir).cgroup_root


def _running(pod: dict) -> bool:
    st = pod.get("status") or {}
    return st.get("phase") == "Running" and all(c.get("ready") for c in st.get("containerStatuses") or [{}])


def http_body(ip: str, within: float = 15.0) -> bytes:
    """GET / from a pod:
    Running (without a readiness probe) does not mean the server has bound its port yet."""
    end = time.monotonic() + within
    while True:
        try:
            return urllib.request.urlopen(f"http://{ip}/", timeout=10).read()
        except urllib.error.URLError as e:
            if not isinstance(e.reason, ConnectionRefusedError) or time.monotonic() > end:
                raise
            time.sleep(0.1)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, images):
    d = tmp_path_factory.mktemp("up")
    for img in (images.busybox, images.httpd):
        subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir",
                        str(d / "images"), "import",
                        "--no-progress", str(img.docker_archive)], check=True, capture_output=True)
    c = Cluster(d, unique("nd"), unique("kb"))
    web = d / "manifest-url"  # static pods from a URL too (--manifest-url), served from here
    web.mkdir()
    (web / "pods.yaml").write_text("")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(_QuietHandler, directory=str(web)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    c.manifest_url_file = web / "pods.yaml"
    c.extra = ["--manifest-url", f"http://127.0.0.1:{server.server_port}/pods.yaml",
               "--http-check-frequency", "1"]
    try:
        c.start()
        yield c
    finally:
        rc = c.shutdown()
        server.shutdown()
        server.server_close()
    assert rc == 0, c.tail()
    assert not Path(f"/sys/class/net/{c.bridge}").exists(), "the pod bridge outlived `up`"
    root = c.cgroup_root()
    assert not any(Path(m, root).exists() for m in hierarchies()), f"cgroup {root} outlived `up`"
    assert str(d) not in Path("/proc/mounts").read_text(), "a mount under the data dir outlived `up`"


def _wait_runtime_empty(c: Cluster, timeout: float = 30) -> None:
    from cri.client import CRIClient

    cri = CRIClient(str(c.data_dir / "cri.sock"), timeout=10)
    try:
        end = time.monotonic() + timeout
        while time.monotonic() < end and c.proc is not None and c.proc.poll() is None:
            if not cri.list_pod_sandbox():
                return
            time.sleep(0.3)
    finally:
        cri.close()


def _assert_pod_gone(c: Cluster, pod: dict, timeout: float = 30) -> None:
    """Soon nothing of the pod is left (a force-deleted pod is cleaned up after its object is gone)."""
    end = time.monotonic() + timeout
    while True:
        try:
            _check_pod_gone(c, pod)
            return
        except AssertionError:
            if time.monotonic() > end:
                raise
            time.sleep(0.3)


def _check_pod_gone(c: Cluster, pod: dict) -> None:
    """Nothing of the pod is left: sandbox, containers, veth, cgroup, volume mounts, IP allocation."""
    from cri.client import CRIClient

    uid = pod["metadata"]["uid"]
    ip = (pod.get("status") or {}).get("podIP")
    cri = CRIClient(str(c.data_dir / "cri.sock"))
    try:
        assert not cri.list_pod_sandbox(label_selector={"io.kubernetes.pod.uid": uid})
        assert not cri.list_containers(label_selector={"io.kubernetes.pod.uid": uid})
    finally:
        cri.close()
    brif = Path(f"/sys/class/net/{c.bridge}/brif")
    assert not brif.exists() or not list(brif.iterdir()), "a veth is still on the pod bridge"
    for m in hierarchies():
        assert not list(Path(m).glob(f"{c.cgroup_root()}/kubepods/**/pod{uid}")), f"pod cgroup left in {m}"
    assert uid not in Path("/proc/mounts").read_text(), "a volume mount of the pod is left"
    assert not (c.data_dir / "kubelet" / "pods" / uid).exists()
    if ip:
        nets = list((c.data_dir / "cni" / "networks").glob(f"*/{ip}"))
        assert not nets, f"IP allocation {ip} is left"


def _delete(c: Cluster, name: str) -> tuple[dict, float]:
    pod = c.pod(name)
    t0 = time.monotonic()
    c.kubectl("delete", "pod", name, "--wait=true", "--timeout=90s")
    return pod, time.monotonic() - t0


def test_pod_runs_with_an_ip_reachable_from_the_host(cluster):
    c = cluster
    end = time.monotonic() + 30
    while True:  # registered NotReady (tainted) until the runtime, the network and the PLEG are fine
        node = json.loads(c.kubectl("get", "node", c.node, "-o", "json"))
        ready = next(x for x in node["status"]["conditions"] if x["type"] == "Ready")
        tainted = any(t["key"] == "node.kubernetes.io/not-ready" for t in node["spec"].get("taints") or [])
        # the taint goes in the write after the Ready status (as kube's lifecycle controller follows it)
        if ready["status"] == "True" and not tainted or time.monotonic() > end:
            break
        time.sleep(0.3)
    assert ready["status"] == "True", ready
    assert node["status"]["capacity"]["pods"] == "110"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("nodeagent://")
    assert not any(t["key"] == "node.kubernetes.io/not-ready" for t in node["spec"].get("taints") or [])

    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
             "spec": {"terminationGracePeriodSeconds": 2,
                      "containers": [{"name": "httpd", "image": HTTPD, "imagePullPolicy": "Never"}]}})
    pod = c.wait_pod("web", _running)
    st = pod["status"]
    conds = {x["type"]: x["status"] for x in st["conditions"]}
    assert conds == {"PodReadyToStartContainers": "True", "Initialized": "True", "Ready": "True",
                     "ContainersReady": "True", "PodScheduled": "True"}
    assert st["hostIP"] and st["qosClass"] == "BestEffort" and st["startTime"]
    assert st["containerStatuses"][0]["containerID"].startswith("nodeagent://")
    ip = st["podIP"]
    body = http_body(ip)
    assert body == b"hello from busybox\n"
    assert Path(f"/sys/class/net/{c.bridge}/brif").exists()
    assert list(Path(f"/sys/class/net/{c.bridge}/brif").iterdir())
    reasons = [e["reason"] for e in c.events("web")]
    assert {"Pulled", "Created", "Started"} <= set(reasons)
    pod, _ = _delete(c, "web")
    _assert_pod_gone(c, pod)


def test_two_containers_share_localhost_and_an_init_container_runs_first(cluster):
    c = cluster
    vol = [{"name": "w", "mountPath": "/work"}]
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "duo"},
             "spec": {"terminationGracePeriodSeconds": 1,
                      "initContainers": [{"name": "init", "image": BUSYBOX, "imagePullPolicy": "Never",
                                          "command": ["sh", "-c", "echo from-init > /work/init.txt"],
                                          "volumeMounts": vol}],
                      "containers": [
                          {"name": "httpd", "image": HTTPD, "imagePullPolicy": "Never"},
                          {"name": "client", "image": BUSYBOX, "imagePullPolicy": "Never",
                           "volumeMounts": vol,
                           "command": ["sh", "-c", "test -f /work/init.txt || exit 3; "
                                       "until wget -qO /work/local.txt http://127.0.0.1/; "
                                       "do sleep 0.2; done; exec sleep 3600"]}],
                      "volumes": [{"name": "w", "emptyDir": {}}]}})
    pod = c.wait_pod("duo", _running)
    uid = pod["metadata"]["uid"]
    init = pod["status"]["initContainerStatuses"][0]
    assert init["state"]["terminated"]["reason"] == "Completed"
    assert all(s["restartCount"] == 0 for s in pod["status"]["containerStatuses"])  # init.txt was there first
    vol_dir = c.data_dir / "kubelet" / "pods" / uid / "volumes" / "kubernetes.io~empty-dir" / "w"
    end = time.monotonic() + 30
    while not (vol_dir / "local.txt").exists() or not (vol_dir / "local.txt").read_text():
        assert time.monotonic() < end, "the client container never reached httpd on localhost"
        time.sleep(0.2)
    assert (vol_dir / "local.txt").read_text() == "hello from busybox\n"
    assert (vol_dir / "init.txt").read_text() == "from-init\n"
    pod, _ = _delete(c, "duo")
    _assert_pod_gone(c, pod)


def test_crashing_container_goes_to_crash_loop_back_off(cluster):
    c = cluster
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "crash"},
             "spec": {"terminationGracePeriodSeconds": 0,  # deleted at once: the kubelet cleans up after
                      "containers": [{"name": "boom", "image": BUSYBOX, "imagePullPolicy": "Never",
                                      "command": ["sh", "-c", "exit 3"]}]}})

    def backing_off(pod):
        for s in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (s.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") == "CrashLoopBackOff" and s.get("restartCount", 0) >= 1:
                return True
        return False

    pod = c.wait_pod("crash", backing_off, timeout=90)
    s = pod["status"]["containerStatuses"][0]
    assert s["lastState"]["terminated"]["exitCode"] == 3
    assert s["lastState"]["terminated"]["reason"] == "Error"
    assert "BackOff" in {e["reason"] for e in c.events("crash")}
    pod, _ = _delete(c, "crash")
    _assert_pod_gone(c, pod)


def test_deletion_honours_the_grace_period(cluster):
    c = cluster
    # pid 1 of its pid namespace ignores SIGTERM (no handler), so only SIGKILL after the grace period ends it
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "slow"},
             "spec": {"terminationGracePeriodSeconds": 3,
                      "containers": [{"name": "sleeper", "image": BUSYBOX, "imagePullPolicy": "Never",
                                      "command": ["sleep", "3600"]}]}})
    c.wait_pod("slow", _running)
    pod, took = _delete(c, "slow")
    assert took >= 2.5, f"deleted after {took:.1f}s: the 3 s grace period was not given"
    assert "Killing" in {e["reason"] for e in c.events("slow")}
    _assert_pod_gone(c, pod)


def test_liveness_failure_restarts_and_readiness_flips_ready(cluster):
    c = cluster
    exec_probe = {"periodSeconds": 1, "failureThreshold": 1, "timeoutSeconds": 2}
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probed"},
             "spec": {"terminationGracePeriodSeconds": 1,
                      "containers": [{"name": "app", "image": BUSYBOX, "imagePullPolicy": "Never",
                                      # healthy for a few seconds, then the liveness file goes away
                                      "command": ["sh", "-c", "touch /tmp/alive; sleep 4; rm /tmp/alive; "
                                                  "exec sleep 3600"],
                                      "livenessProbe": {"exec": {"command": ["test", "-f", "/tmp/alive"]},
                                                        **exec_probe}},
                                     {"name": "web", "image": BUSYBOX, "imagePullPolicy": "Never",
                                      "command": ["sh", "-c", "sleep 3; touch /tmp/ready; exec sleep 3600"],
                                      "readinessProbe": {"exec": {"command": ["test", "-f", "/tmp/ready"]},
                                                         **exec_probe}}]}})

    def ready_of(pod, name):
        return next((s.get("ready") for s in (pod.get("status") or {}).get("containerStatuses") or []
                     if s["name"] == name), None)

    pod = c.wait_pod("probed", lambda p: (p.get("status") or {}).get("phase") == "Running"
                     and ready_of(p, "app") is True)
    conds = {x["type"]: x["status"] for x in pod["status"]["conditions"]}
    assert ready_of(pod, "web") is False and conds["Ready"] == "False"  # /tmp/ready is not there yet
    pod = c.wait_pod("probed", lambda p: ready_of(p, "web") is True)
    assert {x["type"]: x["status"] for x in pod["status"]["conditions"]}["Ready"] in ("True", "False")

    def restarted(p):
        return any(s["name"] == "app" and s.get("restartCount", 0) >= 1
                   for s in (p.get("status") or {}).get("containerStatuses") or [])

    c.wait_pod("probed", restarted, timeout=60)
    events = c.events("probed")
    assert any(e["reason"] == "Unhealthy" and "Liveness probe failed" in e["message"] for e in events), events
    assert any(e["reason"] == "Killing" and "failed liveness probe" in e["message"] for e in events), events
    pod, _ = _delete(c, "probed")
    _assert_pod_gone(c, pod)


def test_limits_reach_the_cgroup_files_in_the_qos_layout(cluster):
    c = cluster
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "guaranteed"},
             "spec": {"terminationGracePeriodSeconds": 1,
                      "containers": [{"name": "app", "image": BUSYBOX, "imagePullPolicy": "Never",
                                      "command": ["sleep", "3600"],
                                      "resources": {"limits": {"cpu": "200m", "memory": "64Mi"}}}]}})
    pod = c.wait_pod("guaranteed", _running)
    assert pod["status"]["qosClass"] == "Guaranteed"
    uid = pod["metadata"]["uid"]
    from kernel.cgroups import detect_cgroups

    info = detect_cgroups()
    if info.version != "v1":
        pytest.skip("checks the cgroup v1 files (this host runs the unified hierarchy)")
    cpu, mem = info.v1_controllers["cpu"], info.v1_controllers["memory"]
    pod_dir = f"{c.cgroup_root()}/kubepods/pod{uid}"  # Guaranteed pods sit directly under kubepods
    quotas = [p.read_text().strip() for p in Path(cpu, pod_dir).glob("*/cpu.cfs_quota_us")]
    shares = [p.read_text().strip() for p in Path(cpu, pod_dir).glob("*/cpu.shares")]
    limits = [p.read_text().strip() for p in Path(mem, pod_dir).glob("*/memory.limit_in_bytes")]
    assert "20000" in quotas and "204" in shares and str(64 << 20) in limits, (quotas, shares, limits)
    pod, _ = _delete(c, "guaranteed")
    _assert_pod_gone(c, pod)


def test_restarting_up_keeps_pods_running_with_their_status(cluster):
    c = cluster
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "survivor"},
             "spec": {"terminationGracePeriodSeconds": 1,
                      "containers": [{"name": "httpd", "image": HTTPD, "imagePullPolicy": "Never"}]}})
    before = c.wait_pod("survivor", _running)["status"]
    assert c.stop() == 0
    c.start()
    time.sleep(2)  # a few PLEG relists and syncs of the re-adopted pod
    after = c.wait_pod("survivor", _running)["status"]
    b, a = before["containerStatuses"][0], after["containerStatuses"][0]
    assert a["containerID"] == b["containerID"] and a["restartCount"] == 0
    assert after["podIP"] == before["podIP"] and after["startTime"] == before["startTime"]
    assert http_body(after["podIP"]) == b"hello from busybox\n"
    pod, _ = _delete(c, "survivor")
    _assert_pod_gone(c, pod)


def test_orphaned_pod_dir_with_a_mounted_volume_is_torn_down(cluster):
    """A pod directory no pod accounts for, its service-account volume (a tmpfs) still mounted, as a node
    stopped before its kubelet tore a deleted pod down leaves it: the kubelet's housekeeping unmounts the
    volume and removes the directory (kubelet's cleanupOrphanedPodDirs), while it runs, with no restart."""
    from kernel.mounts import is_mountpoint, unmount
    from nodeagent.layout import Layout

    c = cluster
    pod_dir = Path(Layout.for_data_dir(c.data_dir).kubelet_root_dir, "pods", unique("orphan"))
    vol = pod_dir / "volumes" / "kubernetes.io~projected" / "kube-api-access-x"
    vol.mkdir(parents=True)
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(vol)], check=True)
        (vol / "token").write_text("left behind")
        end = time.monotonic() + 10  # kubelet's housekeeping tick is 2 s: gone within a few
        while pod_dir.exists() and time.monotonic() < end:
            time.sleep(0.2)
        assert not pod_dir.exists(), f"orphaned pod dir still there\n{c.tail()}"
    finally:
        if vol.exists() and is_mountpoint(vol):
            unmount(vol)
        subprocess.run(["rm", "-rf", str(pod_dir)], check=False)


def test_orphaned_pod_dir_with_a_mount_left_below_it_stays_and_says_why(cluster):
    """A mount the volume manager does not own (here under the pod's plugins dir) keeps an orphaned pod's
    directory: never removed through a mount point (kubelet's RemoveAllOneFilesystem), the reason logged;
    once it is unmounted the directory goes at a following tick."""
    from kernel.mounts import is_mountpoint, unmount
    from nodeagent.layout import Layout

    c = cluster
    uid = unique("kept")
    pod_dir = Path(Layout.for_data_dir(c.data_dir).kubelet_root_dir, "pods", uid)
    held = pod_dir / "plugins" / "example.com~driver" / "mnt"
    held.mkdir(parents=True)
    (pod_dir / "etc-hosts").write_text("127.0.0.1 localhost\n")
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(held)], check=True)
        (held / "precious").write_text("keep me")
        said = f"orphaned pod {uid} found, but its directory stays: cannot remove plugins: cannot delete " \
               f"directory {held}: it is a mount point"
        end = time.monotonic() + 10
        while said not in c.tail(2000) and time.monotonic() < end:
            time.sleep(0.2)
        assert said in c.tail(2000), c.tail()
        assert is_mountpoint(held) and (held / "precious").read_text() == "keep me"
        assert not (pod_dir / "etc-hosts").exists()  # what was beside the mount went, as kubelet's
        unmount(held)
        end = time.monotonic() + 10
        while pod_dir.exists() and time.monotonic() < end:
            time.sleep(0.2)
        assert not pod_dir.exists(), f"orphaned pod dir still there once unmounted\n{c.tail()}"
    finally:
        if held.exists() and is_mountpoint(held):
            unmount(held)
        subprocess.run(["rm", "-rf", str(pod_dir)], check=False)


def test_static_pod_from_the_manifest_url_runs_with_a_mirror_pod(cluster):
    c = cluster
    c.manifest_url_file.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "PodList", "items": [{
            "metadata": {"name": "url-web"},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "httpd", "image": HTTPD, "imagePullPolicy": "Never"}]}}]}))
    name = f"url-web-{c.node}"
    end = time.monotonic() + 60
    while not c.kubectl("get", "pod", name, "--ignore-not-found", "-o", "name"):
        assert time.monotonic() < end, c.tail()
        time.sleep(0.3)
    mirror = c.wait_pod(name, _running)
    ann = mirror["metadata"]["annotations"]
    assert ann["kubernetes.io/config.source"] == "http"
    assert ann["kubernetes.io/config.mirror"] == ann["kubernetes.io/config.hash"]
    ip = mirror["status"]["podIP"]
    assert http_body(ip) == b"hello from busybox\n"
    c.manifest_url_file.write_text("")  # gone from the URL: the pod and its mirror go
    end = time.monotonic() + 60
    while c.kubectl("get", "pod", name, "--ignore-not-found", "-o", "name"):
        assert time.monotonic() < end, "the mirror pod outlived its manifest"
        time.sleep(0.3)
    _assert_pod_gone(c, {"metadata": {"uid": ann["kubernetes.io/config.hash"]}, "status": {"podIP": ip}})


def test_static_pod_from_the_manifest_dir_runs_with_a_mirror_pod(cluster):
    c = cluster
    manifest = c.data_dir / "manifests" / "static-web.yaml"
    manifest.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "static-web"},
        "spec": {"terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "httpd", "image": HTTPD, "imagePullPolicy": "Never"}]}}))
    name = f"static-web-{c.node}"
    end = time.monotonic() + 60
    while not c.kubectl("get", "pod", name, "--ignore-not-found", "-o", "name"):
        assert time.monotonic() < end, c.tail()
        time.sleep(0.3)
    mirror = c.wait_pod(name, _running)
    ann = mirror["metadata"]["annotations"]
    assert ann["kubernetes.io/config.mirror"] == ann["kubernetes.io/config.hash"]
    assert ann["kubernetes.io/config.source"] == "file"
    assert mirror["metadata"]["ownerReferences"][0]["kind"] == "Node"
    ip = mirror["status"]["podIP"]
    assert http_body(ip) == b"hello from busybox\n"
    static_uid = ann["kubernetes.io/config.hash"]
    manifest.unlink()
    end = time.monotonic() + 60
    while c.kubectl("get", "pod", name, "--ignore-not-found", "-o", "name"):
        assert time.monotonic() < end, "the mirror pod outlived its manifest"
        time.sleep(0.3)
    _assert_pod_gone(c, {"metadata": {"uid": static_uid}, "status": {"podIP": ip}})


def test_config_map_volume_waits_for_its_source_and_follows_updates(cluster):
    c = cluster
    c.kubectl("delete", "configmap", "settings", "--ignore-not-found")
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "configured"},
             "spec": {"terminationGracePeriodSeconds": 1,
                      "containers": [{"name": "app", "image": BUSYBOX, "imagePullPolicy": "Never",
                                      "command": ["sleep", "3600"],
                                      "volumeMounts": [{"name": "cfg", "mountPath": "/etc/app"}]}],
                      "volumes": [{"name": "cfg", "configMap": {"name": "settings"}}]}})
    end = time.monotonic() + 30
    while "FailedMount" not in {e["reason"] for e in c.events("configured")}:
        assert time.monotonic() < end, "no FailedMount event for the missing configMap"
        time.sleep(0.3)
    assert c.pod("configured")["status"].get("phase") != "Running"
    c.kubectl("create", "configmap", "settings", "--from-literal=mode=one")
    pod = c.wait_pod("configured", _running)
    uid = pod["metadata"]["uid"]
    mounted = c.data_dir / "kubelet" / "pods" / uid / "volumes" / "kubernetes.io~configmap" / "cfg" / "mode"
    assert mounted.read_text() == "one"
    c.kubectl("create", "configmap", "settings", "--from-literal=mode=two", "--dry-run=client", "-o", "yaml")
    c.kubectl("patch", "configmap", "settings", "-p", '{"data":{"mode":"two"}}')
    end = time.monotonic() + 40
    while mounted.read_text() != "two":
        assert time.monotonic() < end, "the configMap update never reached the mounted file"
        time.sleep(0.5)
    pod, _ = _delete(c, "configured")
    _assert_pod_gone(c, pod)
    c.kubectl("delete", "configmap", "settings")


def test_run_to_completion_pod_succeeds_and_frees_its_sandbox(cluster):
    c = cluster
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "job"},
             "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                      "containers": [{"name": "once", "image": BUSYBOX, "imagePullPolicy": "Never",
                                      "command": ["sh", "-c", "echo done"]}]}})
    pod = c.wait_pod("job", lambda p: (p.get("status") or {}).get("phase") == "Succeeded")
    s = pod["status"]["containerStatuses"][0]
    assert s["state"]["terminated"]["reason"] == "Completed" and s["restartCount"] == 0
    ip = pod["status"].get("podIP")

    from cri.client import CRIClient
    from cri.proto import api_pb2 as pb

    cri = CRIClient(str(c.data_dir / "cri.sock"))
    try:
        selector = {"io.kubernetes.pod.uid": pod["metadata"]["uid"]}
        end = time.monotonic() + 30
        while any(b.state == pb.SANDBOX_READY for b in cri.list_pod_sandbox(label_selector=selector)):
            assert time.monotonic() < end, "the finished pod's sandbox still runs"
            time.sleep(0.3)
    finally:
        cri.close()
    if ip:
        held = list((c.data_dir / "cni" / "networks").glob(f"*/{ip}"))
        assert not held, "the finished pod still holds its IP"
    pod, _ = _delete(c, "job")
    _assert_pod_gone(c, pod)


def test_post_start_and_pre_stop_hooks_run_in_the_container(cluster):
    c = cluster
    out = c.data_dir / "hook-out"
    out.mkdir(exist_ok=True)
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hooked"},
             "spec": {"terminationGracePeriodSeconds": 5,
                      "containers": [{"name": "app", "image": BUSYBOX, "imagePullPolicy": "Never",
                                      "command": ["sleep", "3600"],
                                      "volumeMounts": [{"name": "out", "mountPath": "/out"}],
                                      "lifecycle": {
                                          "postStart": {"exec": {"command": ["sh", "-c",
                                                                             "echo up > /out/post"]}},
                                          "preStop": {"exec": {"command": ["sh", "-c",
                                                                           "echo down > /out/pre"]}}}}],
                      "volumes": [{"name": "out", "hostPath": {"path": str(out), "type": "Directory"}}]}})
    c.wait_pod("hooked", _running)
    assert (out / "post").read_text() == "up\n"
    assert not (out / "pre").exists()
    pod, _ = _delete(c, "hooked")
    assert (out / "pre").read_text() == "down\n"
    _assert_pod_gone(c, pod)


def test_memory_hog_is_oom_killed_and_reported(cluster):
    c = cluster
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hog"},
             "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                      "containers": [{"name": "hog", "image": BUSYBOX, "imagePullPolicy": "Never",
                                      "command": ["sh", "-c",
                                                  "x=aaaaaaaaaaaaaaaa; while true; do x=$x$x; done"],
                                      "resources": {"limits": {"memory": "16Mi"}}}]}})
    pod = c.wait_pod("hog", lambda p: (p.get("status") or {}).get("phase") == "Failed")
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["reason"] == "OOMKilled" and term["exitCode"] == 137, term
    pod, _ = _delete(c, "hog")
    _assert_pod_gone(c, pod)
