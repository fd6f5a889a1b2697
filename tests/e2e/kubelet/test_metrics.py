"""Resource metrics end to end on a real node: the kubelet's /metrics/resource and /metrics/cadvisor, the
metrics.k8s.io API they feed, and `kubectl top` (kubectl 1.20 and the machine's) against the cgroup files.

A busy-looping container is held at 200m by its CPU limit (the CFS quota): what `kubectl top` says it uses
must be within 10% of the rate its cgroup's CPU counter grows at, read here from the cgroup files, and its
memory within 10% of the cgroup's working set (usage minus inactive file).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, cast

import pytest

from tests.e2e.kubelet.test_node_up import BUSYBOX, Cluster, _running, _wait_runtime_empty
from tests.harness.resources import unique
from tests.integration.apiserver.conftest import KUBECTL_120, KUBECTL_132

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

RESOLUTION = "3s"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, images):
    tmp = tmp_path_factory.mktemp("metrics")
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(tmp / "images"), "import",
                    "--no-progress", str(images.busybox.docker_archive)], check=True, capture_output=True)
    c = Cluster(tmp, unique("nd"), unique("kb"))
    c.extra = ["--metric-resolution", RESOLUTION, "--horizontal-pod-autoscaler-sync-period", "3s",
               "--horizontal-pod-autoscaler-downscale-stabilization", "20s",
               "--horizontal-pod-autoscaler-cpu-initialization-period", "10s"]
    c.start()
    try:
        yield c
    finally:
        c.kubectl("delete", "deployments,hpa,pods", "--all", "--wait=true", "--timeout=60s", check=False)
        _wait_runtime_empty(c)
        rc = c.stop()
        assert rc == 0, c.tail()


def kubectl(c: Cluster, binary: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([binary, *args], capture_output=True, text=True, env=c.env, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"{binary} {' '.join(args)}: {p.stderr}\n--- up log ---\n{c.tail()}")
    return p


def binaries() -> list[str]:
    out = [b for b in (KUBECTL_132, KUBECTL_120) if Path(b).exists()]
    if not out:
        pytest.skip("no kubectl found")
    return out


def busy_pod(name: str, cpu: str = "200m", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": name}},
            "spec": {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "burn", "image": BUSYBOX, "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", "while :; do :; done"],
                                     "resources": {"requests": {"cpu": cpu, "memory": "16Mi"},
                                                   "limits": {"cpu": cpu, "memory": "64Mi"}}}]}}


def container_cgroup(c: Cluster, pod: dict[str, Any]) -> tuple[Path, Path]:
    """The busy container's (cpu, memory) cgroup directories."""
    from kernel.cgroups import detect_cgroups

    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    uid = pod["metadata"]["uid"]
    pattern = f"{c.cgroup_root()}/kubepods/**/pod{uid}/{cid}".lstrip("/")  # Burstable: under burstable/

    def find(root: str) -> Path:
        found = list(Path(root).glob(pattern))
        assert len(found) == 1, (root, pattern, found)
        return found[0]

    info = detect_cgroups()
    if info.version == "v1":
        return find(info.v1_controllers["cpuacct"]), find(info.v1_controllers["memory"])
    d = find(info.v2_root or "/sys/fs/cgroup")
    return d, d


def cgroup_cpu_seconds(d: Path) -> float:
    if (d / "cpuacct.usage").exists():
        return int((d / "cpuacct.usage").read_text()) / 1e9
    stat = dict(line.split() for line in (d / "cpu.stat").read_text().splitlines())
    return int(stat["usage_usec"]) / 1e6


def cgroup_working_set(d: Path) -> int:
    stat = dict(line.split() for line in (d / "memory.stat").read_text().splitlines())
    if (d / "memory.usage_in_bytes").exists():
        usage = int((d / "memory.usage_in_bytes").read_text())
        return usage - int(stat.get("total_inactive_file", stat.get("inactive_file", 0)))
    return int((d / "memory.current").read_text()) - int(stat.get("inactive_file", 0))


def wait_metrics(c: Cluster, path: str, timeout: float = 60) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while True:
        p = kubectl(c, KUBECTL_132, "get", "--raw", path, check=False)
        if p.returncode == 0:
            return json.loads(p.stdout)
        assert time.monotonic() < end, f"{path}: {p.stderr}\n{c.tail()}"
        time.sleep(1)


def milli(cpu: str) -> float:
    from nodeagent.api.quantity import parse_quantity

    return float(parse_quantity(cpu) * 1000)


class CgroupSampler:
    """The container's cumulative CPU read from its cgroup every 20 ms, with the wall time of each read;
    its memory working set beside it (a container of a few hundred KiB moves by more than 10 % between a
    scrape and a later read)."""

    def __init__(self, d: Path, mem_dir: Path | None = None) -> None:
        import threading

        self.dir, self.samples = d, []  # type: tuple[Path, list[tuple[float, float]]]
        self.mem_dir, self.working_sets = mem_dir, []  # type: tuple[Path | None, list[tuple[float, int]]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.samples.append((time.time(), cgroup_cpu_seconds(self.dir)))
            if self.mem_dir is not None:
                self.working_sets.append((time.time(), cgroup_working_set(self.mem_dir)))

    def cover(self, until: float, timeout: float = 10.0) -> None:
        """Wait until the reads reach wall time `until` (the API's window may end less than a second ago)."""
        end = time.monotonic() + timeout
        while (not self.samples or self.samples[-1][0] < until) and time.monotonic() < end:
            time.sleep(0.05)

    def working_sets_around(self, t: float, before: float = 1.0, after: float = 2.0) -> list[int]:
        """The working sets read from `before` s ahead of t to `after` s past it (the API's timestamp is
        the scrape's, to the second)."""
        return [ws for at, ws in self.working_sets if t - before <= at <= t + after]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def at(self, t: float) -> float:
        """The counter at wall time t, interpolated between the reads around it."""
        for (t0, u0), (t1, u1) in zip(self.samples, self.samples[1:], strict=False):
            if t0 <= t <= t1:
                return u0 + (u1 - u0) * (t - t0) / (t1 - t0)
        raise AssertionError(f"no cgroup samples around {t}")

    def rates(self, end_from: float, window: float) -> list[float]:
        """The cgroup's CPU rate (millicores) over `window` seconds ending anywhere in [end_from, end_from+1):
        the metrics API writes its timestamp to the second."""
        self.cover(end_from + 1.0)
        return [(self.at(e) - self.at(e - window)) / window * 1000
                for e in (end_from + i * 0.05 for i in range(20))]


def test_kubectl_top_matches_the_cgroup_of_a_container_held_at_200m(cluster):
    from nodeagent.api.quantity import parse_quantity
    from nodeagent.api.times import parse_duration, parse_time

    c = cluster
    c.apply(busy_pod("burner"))
    pod = c.wait_pod("burner", _running)
    cpu_dir, mem_dir = container_cgroup(c, pod)
    sampler = CgroupSampler(cpu_dir, mem_dir)
    path = "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/burner"
    try:
        wait_metrics(c, path)
        time.sleep(8)  # windows that start after the sampler did
        for binary in binaries():
            for _ in range(10):  # kubectl top and the API's window read between two scrapes
                doc = json.loads(kubectl(c, binary, "get", "--raw", path).stdout)
                out = kubectl(c, binary, "top", "pod", "burner", "--no-headers").stdout.split()
                again = json.loads(kubectl(c, binary, "get", "--raw", path).stdout)
                if doc["timestamp"] == again["timestamp"] and doc["window"] == again["window"]:
                    break
            assert out[0] == "burner", out
            shown = milli(out[1])
            ts = parse_time(doc["timestamp"])
            assert ts is not None
            rates = sampler.rates(ts.timestamp(), parse_duration(doc["window"]))
            assert any(abs(shown - r) <= 0.1 * r for r in rates), \
                f"{binary}: kubectl top {shown}m, the cgroup over that window " \
                f"{min(rates):.0f}-{max(rates):.0f}m"
            assert max(rates) <= 220, f"the quota holds the loop at 200m, the cgroup says {max(rates):.0f}m"
            served = int(parse_quantity(doc["containers"][0]["usage"]["memory"]))
            around = sampler.working_sets_around(ts.timestamp())
            assert any(abs(served - ws) <= 0.1 * ws for ws in around), \
                f"metrics API {served} bytes, cgroup working set around its timestamp {sorted(set(around))}"
            assert doc["kind"] == "PodMetrics" and doc["window"].endswith("s")
    finally:
        sampler.stop()


def test_kubectl_top_variants_with_both_kubectls(cluster):
    c = cluster
    idle = busy_pod("small", "100m", {"app": "small", "tier": "x"})
    idle["spec"]["containers"][0]["command"] = ["sleep", "3600"]  # uses next to nothing, whatever the load
    c.apply(idle)
    c.apply(busy_pod("big", "300m", {"app": "big", "tier": "x"}))
    for name in ("small", "big"):
        c.wait_pod(name, _running)
        wait_metrics(c, f"/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/{name}")
    time.sleep(4)
    for binary in binaries():
        nodes = kubectl(c, binary, "top", "nodes", "--no-headers").stdout.split("\n")
        assert any(line.split()[:1] == [c.node] and "%" in line for line in nodes), nodes
        rows = [r.split() for r in kubectl(c, binary, "top", "pods", "-l", "tier=x", "--sort-by=cpu",
                                           "--no-headers").stdout.strip().splitlines()]
        assert [r[0] for r in rows] == ["big", "small"], rows
        rows = [r.split() for r in kubectl(c, binary, "top", "pods", "-A", "--containers",
                                           "--no-headers").stdout.strip().splitlines()]
        assert ["default", "big", "burn"] == rows[[r[1] for r in rows].index("big")][:3], rows
        rows = [r.split() for r in kubectl(c, binary, "top", "pods", "-l", "tier=x", "--sort-by=memory",
                                           "--no-headers").stdout.strip().splitlines()]
        assert {r[0] for r in rows} == {"big", "small"}
        p = kubectl(c, binary, "top", "pod", "nosuchpod", check=False)
        assert p.returncode != 0 and "not found" in p.stderr, p.stderr
    c.kubectl("delete", "pod", "small", "big", "--wait=true", "--timeout=60s")


def test_python_client_reads_node_and_pod_metrics(cluster):
    from kubernetes import client, config

    c = cluster
    c.apply(busy_pod("py", "100m"))
    c.wait_pod("py", _running)
    wait_metrics(c, "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/py")
    kubeconfig = str(c.data_dir / "admin.kubeconfig")
    co = client.CustomObjectsApi(config.new_client_from_config(config_file=kubeconfig))
    nodes = cast(dict[str, Any], co.list_cluster_custom_object("metrics.k8s.io", "v1beta1", "nodes"))
    assert c.node in [n["metadata"]["name"] for n in nodes["items"]]
    pods = cast(dict[str, Any], co.list_namespaced_custom_object("metrics.k8s.io", "v1beta1", "default",
                                                                 "pods", label_selector="app=py"))
    assert [p["metadata"]["name"] for p in pods["items"]] == ["py"]
    assert pods["items"][0]["containers"][0]["name"] == "burn"
    svc = json.loads(c.kubectl("get", "apiservice", "v1beta1.metrics.k8s.io", "-o", "json"))
    avail = next(x for x in svc["status"]["conditions"] if x["type"] == "Available")
    assert avail["status"] == "True"
    c.kubectl("delete", "pod", "py", "--wait=true", "--timeout=60s")


def test_kubelet_serves_resource_and_cadvisor_metrics(cluster):
    c = cluster
    c.apply(busy_pod("scraped", "100m"))
    pod = c.wait_pod("scraped", _running)
    base = f"/api/v1/nodes/{c.node}/proxy/metrics"
    resource = kubectl(c, KUBECTL_132, "get", "--raw", f"{base}/resource").stdout
    want = 'container_cpu_usage_seconds_total{container="burn",namespace="default",pod="scraped"}'
    assert want in resource, resource
    for name in ("node_cpu_usage_seconds_total", "node_memory_working_set_bytes",
                 "pod_cpu_usage_seconds_total", "container_memory_working_set_bytes",
                 "container_start_time_seconds", "scrape_error 0"):
        assert name in resource, name
    cadvisor = kubectl(c, KUBECTL_132, "get", "--raw", f"{base}/cadvisor").stdout
    cid = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    line = next((x for x in cadvisor.splitlines()
                 if x.startswith("container_cpu_usage_seconds_total{") and f'name="{cid}"' in x), None)
    assert line is not None, cadvisor[:2000]
    for label in ('container="burn"', 'namespace="default"', 'pod="scraped"', 'cpu="total"',
                  f'id="/{c.cgroup_root().strip("/")}/kubepods/burstable/pod{pod["metadata"]["uid"]}/{cid}"',
                  f'image="{BUSYBOX}"'):
        assert label in line, (label, line)
    for name in ("container_memory_working_set_bytes{", "container_memory_usage_bytes{",
                 "container_fs_usage_bytes{", "container_network_receive_bytes_total{",
                 "machine_cpu_cores ", "machine_memory_bytes "):
        assert name in cadvisor, name
    net = [x for x in cadvisor.splitlines()
           if x.startswith("container_network_receive_bytes_total{") and 'pod="scraped"' in x]
    assert any('interface="eth0"' in x for x in net), net
    c.kubectl("delete", "pod", "scraped", "--wait=true", "--timeout=60s")


def deployment(name: str, cpu: str = "100m") -> dict[str, Any]:
    """Burns CPU until /tmp/stop exists, then idles."""
    burn = "while [ ! -f /tmp/stop ]; do :; done; exec sleep 3600"
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"terminationGracePeriodSeconds": 1,
                                           "containers": [{"name": "burn", "image": BUSYBOX,
                                                           "imagePullPolicy": "Never",
                                                           "command": ["sh", "-c", burn],
                                                           "resources": {"requests": {"cpu": cpu},
                                                                         "limits": {"cpu": cpu}}}]}}}}


def hpa_v2(name: str, target: int, max_replicas: int) -> dict[str, Any]:
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": name},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "minReplicas": 1, "maxReplicas": max_replicas,
                     "metrics": [{"type": "Resource", "resource": {
                         "name": "cpu", "target": {"type": "Utilization", "averageUtilization": target}}}]}}


def wait_replicas(c: Cluster, name: str, want: int, timeout: float = 150) -> None:
    end = time.monotonic() + timeout
    got = None
    while time.monotonic() < end:
        got = json.loads(c.kubectl("get", "deploy", name, "-o", "json"))["spec"].get("replicas")
        if got == want:
            return
        time.sleep(1)
    hpa = c.kubectl("get", "hpa", name, "-o", "yaml", check=False)
    raise AssertionError(f"deployment {name}: {got} replicas, not {want}\n{hpa}\n{c.tail()}")


@pytest.mark.parametrize("binary", ["1.32", "1.20"])
def test_hpa_scales_a_cpu_burning_deployment_to_3_and_back_after_the_stabilization_window(cluster, binary):
    import yaml

    c = cluster
    kubectl_bin = KUBECTL_132 if binary == "1.32" else KUBECTL_120
    if not Path(kubectl_bin).exists():
        pytest.skip(f"kubectl {binary} not found")
    name = f"burn{binary.replace('.', '')}"
    c.kubectl("apply", "-f", "-", input=yaml.safe_dump(deployment(name)))
    made = kubectl(c, kubectl_bin, "autoscale", "deployment", name, "--cpu-percent=50", "--min=1", "--max=3",
                   check=False)
    if made.returncode != 0:  # this kubectl writes autoscaling/v1, which is not served here (yet)
        assert "autoscaling/v1" in made.stderr or "the server could not find" in made.stderr, made.stderr
        import warnings

        warnings.warn(f"kubectl {binary} autoscale: {made.stderr.strip()}; the HPA is applied as "
                      "autoscaling/v2", stacklevel=1)
        c.kubectl("apply", "-f", "-", input=yaml.safe_dump(hpa_v2(name, 50, 3)))
    wait_replicas(c, name, 3)
    rows = kubectl(c, kubectl_bin, "get", "hpa", name, "--no-headers").stdout.split()
    assert rows[1] == f"Deployment/{name}" and rows[2] == "cpu:", rows
    assert rows[3].endswith("%/50%") and rows[3] != "<unknown>/50%", rows
    events = json.loads(c.kubectl("get", "events", "--field-selector", f"involvedObject.name={name}",
                                  "-o", "json"))["items"]
    rescales = [e["message"] for e in events if e["reason"] == "SuccessfulRescale"]
    assert any(m.startswith("New size: ") and "cpu resource utilization (percentage of request) above target"
               in m for m in rescales), rescales
    hpa = json.loads(c.kubectl("get", "hpa.v2.autoscaling", name, "-o", "json"))
    conds = {x["type"]: x for x in hpa["status"]["conditions"]}
    assert conds["ScalingActive"]["status"] == "True" and conds["AbleToScale"]["status"] == "True", conds
    # the load stops: after the (shortened) stabilization window it scales back to one
    pods = json.loads(c.kubectl("get", "pods", "-l", f"app={name}", "-o", "json"))["items"]
    for p in pods:
        c.kubectl("exec", p["metadata"]["name"], "--", "touch", "/tmp/stop", check=False)
    wait_replicas(c, name, 1)
    events = json.loads(c.kubectl("get", "events", "--field-selector", f"involvedObject.name={name}",
                                  "-o", "json"))["items"]
    assert any(e["message"] == "New size: 1; reason: All metrics below target" for e in events), events
    c.kubectl("delete", "hpa.v2.autoscaling,deployment", name, "--wait=true", "--timeout=60s")


def test_hpa_on_a_target_without_requests_says_why_it_cannot_scale(cluster):
    import yaml

    c = cluster
    d = deployment("noreq")
    del d["spec"]["template"]["spec"]["containers"][0]["resources"]
    d["spec"]["template"]["spec"]["containers"][0]["command"] = ["sleep", "3600"]
    c.kubectl("apply", "-f", "-", input=yaml.safe_dump(d))
    c.kubectl("apply", "-f", "-", input=yaml.safe_dump(hpa_v2("noreq", 50, 3)))
    end = time.monotonic() + 90
    active: dict[str, Any] = {}
    while time.monotonic() < end:
        st = json.loads(c.kubectl("get", "hpa.v2.autoscaling", "noreq", "-o", "json")).get("status") or {}
        active = next((x for x in st.get("conditions") or [] if x["type"] == "ScalingActive"), {})
        if "missing request" in active.get("message", ""):  # (before that: no metrics of the pod yet)
            break
        time.sleep(1)
    assert active.get("status") == "False" and active.get("reason") == "FailedGetResourceMetric", active
    assert "missing request for cpu in container burn of Pod noreq-" in active["message"], active
    events = json.loads(c.kubectl("get", "events", "--field-selector", "involvedObject.name=noreq",
                                  "-o", "json"))["items"]
    assert any(e["reason"] == "FailedGetResourceMetric" and e["type"] == "Warning" for e in events), events
    c.kubectl("delete", "hpa.v2.autoscaling,deployment", "noreq", "--wait=true", "--timeout=60s")
