"""The kubelet's Node API behind `nodeagent up`: logs, exec, port-forward, stats and metrics through the
apiserver's proxy with the machine's kubectl (1.32), Debian's kubectl 1.20 and the Python client, and the
API's own TLS/auth on its port.

SPDY-only paths (kubectl 1.20 exec, every kubectl's port-forward) are skipped only when the runtime's
streaming server does not answer a SPDY upgrade, asked of the runtime itself.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.e2e.kubelet.test_node_up import BUSYBOX, HTTPD, _running, cluster  # noqa: F401 - the fixture

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
KUBECTL_120 = REPO / ".cache" / "kubectl-1.20" / "usr" / "bin" / "kubectl"
TICKER = "i=0; while true; do echo tick $i; echo err $i >&2; i=$((i+1)); sleep 0.3; done"


@pytest.fixture(scope="module")
def ticker(cluster):  # noqa: F811
    cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "ticker"},
                   "spec": {"terminationGracePeriodSeconds": 1,
                            "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                                            "command": ["sh", "-c", TICKER]}]}})
    pod = cluster.wait_pod("ticker", _running)
    yield pod
    cluster.kubectl("delete", "pod", "ticker", "--wait=true", "--timeout=60s", check=False)


def _node(c) -> dict:
    return json.loads(c.kubectl("get", "node", c.node, "-o", "json"))


def _kubelet_url(c) -> str:
    st = _node(c)["status"]
    port = st["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    ip = next(a["address"] for a in st["addresses"] if a["type"] == "InternalIP")
    return f"https://{ip}:{port}"


def _admin_token(c) -> str:
    return yaml.safe_load((c.data_dir / "admin.kubeconfig").read_text())["users"][0]["user"]["token"]


def _get(url: str, token: str | None = None, ctx: ssl.SSLContext | None = None) -> tuple[int, bytes]:
    if ctx is None:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _lines(text: str, prefix: str) -> list[int]:
    return [int(line.split()[1]) for line in text.splitlines() if line.startswith(prefix + " ")]


# -- the API itself -----------------------------------------------------------------------------------

def test_node_publishes_its_kubelet_port_and_the_api_requires_auth(cluster):  # noqa: F811
    c = cluster
    url = _kubelet_url(c)
    assert int(url.rsplit(":", 1)[1]) > 0
    assert _get(f"{url}/healthz")[0] == 401, "anonymous requests must be refused"
    assert _get(f"{url}/pods", token="not-a-token")[0] == 401
    assert _get(f"{url}/healthz", token=_admin_token(c)) == (200, b"ok")
    # the serving cert chains to the cluster CA under `up` (the CA key is at hand there)
    ca = ssl.create_default_context(cafile=str(c.data_dir / "pki" / "ca.crt"))
    ca.check_hostname = False
    assert _get(f"{url}/healthz", token=_admin_token(c), ctx=ca) == (200, b"ok")
    serving_cert = c.data_dir / "kubelet" / "pki" / "kubelet.crt"
    assert serving_cert.exists(), "the serving cert lives in the instance's dirs"
    # a client certificate signed by the cluster CA in group system:masters (the apiserver's) is accepted
    from nodeagent.apiserver.pki import ensure_kubelet_client_cert

    crt, key = ensure_kubelet_client_cert(c.data_dir / "pki")
    cert_ctx = ssl.create_default_context()
    cert_ctx.check_hostname = False
    cert_ctx.verify_mode = ssl.CERT_NONE
    cert_ctx.load_cert_chain(str(crt), str(key))
    status, body = _get(f"{url}/pods", ctx=cert_ctx)
    assert status == 200 and json.loads(body)["kind"] == "PodList"


def test_node_token_may_not_use_the_kubelet_api(cluster):  # noqa: F811
    """A node's own token is authenticated but not allowed nodes/proxy (the apiserver's NodeRestriction)."""
    from nodeagent.apiserver.auth import issue_node_token

    tok = issue_node_token(cluster.data_dir, "some-other-node")
    status, body = _get(f"{_kubelet_url(cluster)}/pods", token=tok)
    assert status == 403, body


def test_pods_lists_this_nodes_pods(cluster, ticker):  # noqa: F811
    out = json.loads(cluster.kubectl("get", "--raw", f"/api/v1/nodes/{cluster.node}/proxy/pods"))
    assert out["kind"] == "PodList"
    mine = [p for p in out["items"] if p["metadata"]["uid"] == ticker["metadata"]["uid"]]
    assert mine and mine[0]["status"]["phase"] == "Running"


def test_stats_summary_through_the_apiserver(cluster, ticker):  # noqa: F811
    s = json.loads(cluster.kubectl("get", "--raw", f"/api/v1/nodes/{cluster.node}/proxy/stats/summary"))
    node = s["node"]
    assert node["nodeName"] == cluster.node
    # a rate over a short window may be 0 on a quiet machine (/proc/stat counts 10 ms ticks):
    # present, not negative
    assert node["cpu"]["usageCoreNanoSeconds"] > 0 and node["cpu"]["usageNanoCores"] >= 0
    assert 0 < node["memory"]["workingSetBytes"] <= node["memory"]["usageBytes"]
    assert node["memory"]["availableBytes"] > 0
    assert node["fs"]["capacityBytes"] > node["fs"]["availableBytes"] > 0 and node["fs"]["inodes"] > 0
    assert node["rlimit"]["maxpid"] > node["rlimit"]["curproc"] > 0
    assert "rxBytes" in node["network"]
    pods = [p for p in s["pods"] if p["podRef"]["uid"] == ticker["metadata"]["uid"]]
    assert pods, [p["podRef"] for p in s["pods"]]
    pod = pods[0]
    assert pod["podRef"] == {"name": "ticker", "namespace": "default", "uid": ticker["metadata"]["uid"]}
    (ctr,) = pod["containers"]
    assert ctr["name"] == "main"
    assert ctr["cpu"]["usageCoreNanoSeconds"] > 0 and "usageNanoCores" in ctr["cpu"]
    assert ctr["memory"]["workingSetBytes"] > 0
    assert ctr["memory"]["usageBytes"] >= ctr["memory"]["workingSetBytes"]
    assert pod["cpu"]["usageCoreNanoSeconds"] >= ctr["cpu"]["usageCoreNanoSeconds"]
    assert pod["memory"]["workingSetBytes"] > 0


def test_metrics_through_the_apiserver(cluster, ticker):  # noqa: F811
    from prometheus_client.parser import text_string_to_metric_families

    def scrape() -> dict:
        text = cluster.kubectl("get", "--raw", f"/api/v1/nodes/{cluster.node}/proxy/metrics")
        return {f.name: f for f in text_string_to_metric_families(text)}

    # The running counts come from the last relist (once a second, as kubelet's PLEG cache): the pod
    # worker can report the pod Running before the next relist has seen it, and a relist between the
    # container's create and its start counts the sandbox ready and the container created.
    def containers(f: dict) -> dict:
        return {s.labels.get("container_state"): s.value for s in f["kubelet_running_containers"].samples}

    deadline = time.monotonic() + 30
    fams = scrape()
    while (fams["kubelet_running_pods"].samples[0].value < 1 or containers(fams).get("running", 0) < 1) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
        fams = scrape()
    running = containers(fams)
    assert fams["kubelet_running_pods"].samples[0].value >= 1
    assert running.get("running", 0) >= 1
    relist = {s.name: s.value for s in fams["kubelet_pleg_relist_duration_seconds"].samples}
    assert relist["kubelet_pleg_relist_duration_seconds_count"] > 0
    start = {s.name: s.value for s in fams["kubelet_pod_start_duration_seconds"].samples}
    assert start["kubelet_pod_start_duration_seconds_count"] >= 1


# -- logs ----------------------------------------------------------------------------------------------

def test_logs_tail_timestamps_and_limit(cluster, ticker):  # noqa: F811
    c = cluster
    time.sleep(1.5)
    out = c.kubectl("logs", "ticker")
    ticks, errs = _lines(out, "tick"), _lines(out, "err")
    assert ticks[:3] == [0, 1, 2] and errs[:3] == [0, 1, 2], out
    assert ticks == list(range(len(ticks))), "the content is stripped of the CRI prefix, in order"
    tail = c.kubectl("logs", "ticker", "--tail=3").splitlines()
    assert len(tail) == 3 and all(line.split()[0] in ("tick", "err") for line in tail), tail
    stamped = c.kubectl("logs", "ticker", "--tail=1", "--timestamps").splitlines()
    assert len(stamped) == 1 and stamped[0].split()[0].endswith("Z")
    assert stamped[0].split()[1] in ("tick", "err")
    assert len(c.kubectl("logs", "ticker", "--limit-bytes=5")) == 5
    recent = c.kubectl("logs", "ticker", "--since=1s")
    assert 0 < len(_lines(recent, "tick")) < len(_lines(c.kubectl("logs", "ticker"), "tick"))


@pytest.mark.parametrize("kubectl", ["kubectl", "1.20"])
def test_logs_follow_sees_new_lines(cluster, ticker, kubectl):  # noqa: F811
    binary = "kubectl" if kubectl == "kubectl" else str(KUBECTL_120)
    if kubectl == "1.20" and not KUBECTL_120.exists():
        pytest.skip(f"kubectl 1.20 not unpacked at {KUBECTL_120} (make deps)")
    last = max(_lines(cluster.kubectl("logs", "ticker"), "tick"))
    p = subprocess.Popen([binary, "logs", "-f", "ticker", "--tail=1"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=cluster.env)
    assert p.stdout is not None and p.stderr is not None
    seen: list[int] = []
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end and not any(n > last + 3 for n in seen):
            line = p.stdout.readline()
            assert line, f"logs -f ended early: {p.stderr.read()}"
            seen += _lines(line, "tick")
    finally:
        p.kill()
        p.wait()
    assert any(n > last + 3 for n in seen), (last, seen)


def test_logs_previous_after_a_restart(cluster):  # noqa: F811
    c = cluster
    script = ("n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; echo run $n; "
              "sleep 1; exit 1")
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "restarter"},
             "spec": {"terminationGracePeriodSeconds": 1, "volumes": [{"name": "d", "emptyDir": {}}],
                      "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                                      "command": ["sh", "-c", script],
                                      "volumeMounts": [{"name": "d", "mountPath": "/data"}]}]}})
    try:
        def restarted(p: dict) -> bool:
            statuses = (p.get("status") or {}).get("containerStatuses") or []
            return any(s.get("restartCount", 0) >= 1 for s in statuses)
        for _ in range(5):
            pod = c.wait_pod("restarter", restarted, timeout=90)
            before = pod["status"]["containerStatuses"][0]["restartCount"]
            prev = c.kubectl("logs", "restarter", "--previous")
            after = c.pod("restarter")["status"]["containerStatuses"][0]["restartCount"]
            if before == after:
                assert prev == f"run {before}\n", prev
                break
        else:
            pytest.fail("the container kept restarting while its previous log was read")
        cur = c.kubectl("logs", "restarter")
        assert cur in ("", f"run {after + 1}\n"), cur
    finally:
        c.kubectl("delete", "pod", "restarter", "--wait=true", "--timeout=60s", check=False)


def test_unknown_pod_or_container_is_a_not_found_status(cluster, ticker):  # noqa: F811
    base = f"/api/v1/nodes/{cluster.node}/proxy/containerLogs/default"
    for path, words in ((f"{base}/ticker/nope", 'container "nope" not found'),
                        (f"{base}/no-such-pod/main", 'pod "default/no-such-pod" not found')):
        p = subprocess.run(["kubectl", "get", "--raw", path], capture_output=True, text=True, env=cluster.env)
        assert p.returncode != 0 and "NotFound" in p.stderr and words in p.stderr, p.stderr


# -- exec ------------------------------------------------------------------------------------------------

def test_exec_stdout_stderr_and_exit_code(cluster, ticker):  # noqa: F811
    p = subprocess.run(["kubectl", "exec", "ticker", "--", "sh", "-c", "echo out; echo err >&2; exit 3"],
                       capture_output=True, text=True, env=cluster.env, timeout=60)
    assert p.stdout == "out\n", p
    assert "err\n" in p.stderr
    assert p.returncode == 3, p


def test_exec_stdin(cluster, ticker):  # noqa: F811
    out = cluster.kubectl("exec", "-i", "ticker", "--", "sh", "-c", "tr a-z A-Z", input="hello stdin\n")
    assert out == "HELLO STDIN\n"


def test_attach_streams_the_containers_output(cluster, ticker):  # noqa: F811
    p = subprocess.Popen(["kubectl", "attach", "ticker"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env=cluster.env)
    assert p.stdout is not None and p.stderr is not None
    seen: list[int] = []
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end and len(seen) < 3:
            line = p.stdout.readline()
            assert line, p.stderr.read()
            seen += _lines(line, "tick")
    finally:
        p.kill()
        p.wait()
    assert len(seen) >= 3 and seen == sorted(seen), seen


def _runtime_speaks_spdy(c) -> str | None:
    """None when the runtime's streaming server answers a SPDY/3.1 upgrade with 101, else why not."""
    from urllib.parse import urlsplit

    from cri.client import CRIClient
    from cri.proto import api_pb2 as pb

    cri = CRIClient(str(c.data_dir / "cri.sock"))
    try:
        (ctr,) = [x for x in cri.list_containers(label_selector={"io.kubernetes.pod.name": "ticker"})
                  if x.state == pb.CONTAINER_RUNNING]
        url = cri.exec(ctr.id, ["true"], stdout=True)
    finally:
        cri.close()
    u = urlsplit(url)
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall((f"POST {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\n"
                   "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
                   "X-Stream-Protocol-Version: v4.channel.k8s.io\r\nContent-Length: 0\r\n\r\n").encode())
        head = s.recv(4096).decode(errors="replace")
    status = head.split("\r\n", 1)[0]
    if " 101 " in status + " ":
        return None
    return f"the runtime's streaming server does not speak SPDY/3.1 ({status})"


def test_exec_with_kubectl_1_20(cluster, ticker):  # noqa: F811
    if not KUBECTL_120.exists():
        pytest.skip(f"kubectl 1.20 not unpacked at {KUBECTL_120} (make deps)")
    why = _runtime_speaks_spdy(cluster)
    if why:
        pytest.skip(f"kubectl 1.20 exec needs SPDY: {why}")
    p = subprocess.run([str(KUBECTL_120), "exec", "-i", "ticker", "--", "sh", "-c", "cat; exit 4"],
                       input="spdy\n",
                       capture_output=True, text=True, env=cluster.env, timeout=60)
    assert p.stdout == "spdy\n" and p.returncode == 4, p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def web(cluster):  # noqa: F811
    cluster.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
                   "spec": {"terminationGracePeriodSeconds": 1,
                            "containers": [{"name": "httpd", "image": HTTPD, "imagePullPolicy": "Never"}]}})
    yield cluster.wait_pod("web", _running)
    cluster.kubectl("delete", "pod", "web", "--wait=true", "--timeout=60s", check=False)


@pytest.mark.parametrize("kubectl", ["kubectl", "1.20"])
def test_kubectl_port_forward(cluster, ticker, web, kubectl):  # noqa: F811
    binary = "kubectl" if kubectl == "kubectl" else str(KUBECTL_120)
    if kubectl == "1.20" and not KUBECTL_120.exists():
        pytest.skip(f"kubectl 1.20 not unpacked at {KUBECTL_120} (make deps)")
    why = _runtime_speaks_spdy(cluster)
    if why:
        pytest.skip(f"kubectl port-forward needs SPDY framing: {why}")
    port = _free_port()
    p = subprocess.Popen([binary, "port-forward", "pod/web", f"{port}:80"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=cluster.env)
    assert p.stdout is not None and p.stderr is not None
    try:
        line = p.stdout.readline()
        assert "Forwarding from" in line, p.stderr.read()
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read()
        assert body == b"hello from busybox\n"
    finally:
        p.kill()
        p.wait()


# -- the Python client -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def core(cluster):  # noqa: F811
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(cluster.data_dir / "admin.kubeconfig"))
    yield client.CoreV1Api(api)
    api.close()


def test_python_client_exec_and_logs(cluster, ticker, core):  # noqa: F811
    from kubernetes.stream import stream

    out = stream(core.connect_get_namespaced_pod_exec, "ticker", "default",
                 command=["sh", "-c", "echo from-python; echo e >&2"], stderr=False, stdin=False, stdout=True,
                 tty=False)
    assert out == "from-python\n"
    ws = stream(core.connect_get_namespaced_pod_exec, "ticker", "default", command=["sh", "-c", "exit 7"],
                stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
    ws.run_forever(timeout=30)
    assert ws.returncode == 7
    log = core.read_namespaced_pod_log("ticker", "default", tail_lines=4)
    assert len(log.splitlines()) == 4


def test_python_client_port_forward(cluster, web, core):  # noqa: F811
    from kubernetes.stream import portforward

    pf = portforward(core.connect_get_namespaced_pod_portforward, "web", "default", ports="80")
    try:
        sock = pf.socket(80)
        sock.setblocking(True)
        sock.settimeout(10)
        sock.sendall(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n")
        data = b""
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        assert data.endswith(b"hello from busybox\n"), data
        assert pf.error(80) is None
    finally:
        pf.close()


def test_stale_follow_ends_when_the_pod_goes(cluster):  # noqa: F811
    """`logs -f` of a container that exits ends instead of hanging."""
    c = cluster
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "brief"},
             "spec": {"terminationGracePeriodSeconds": 1, "restartPolicy": "Never",
                      "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                                      "command": ["sh", "-c", "echo one; sleep 3; echo two"]}]}})
    try:
        c.wait_pod("brief", lambda p: (p.get("status") or {}).get("phase") in ("Running", "Succeeded"))
        p = subprocess.run(["kubectl", "logs", "-f", "brief"], capture_output=True, text=True, env=c.env,
                           timeout=60)
        assert p.returncode == 0 and p.stdout == "one\ntwo\n", p
    finally:
        c.kubectl("delete", "pod", "brief", "--wait=true", "--timeout=60s", check=False)


def _logs_in_flight(c) -> float:
    """The kubelet's own count of container-log requests it is serving (kubelet_http_inflight_requests):
    the scrape reading it is in flight too, but in the path="metrics" series."""
    from prometheus_client.parser import text_string_to_metric_families

    status, body = _get(f"{_kubelet_url(c)}/metrics", token=_admin_token(c))
    assert status == 200, body
    for fam in text_string_to_metric_families(body.decode()):
        if fam.name == "kubelet_http_inflight_requests":
            return sum(s.value for s in fam.samples if s.labels.get("path") == "containerLogs"
                       and s.labels.get("long_running") == "false")
    return 0.0


def test_follow_of_a_silent_container_ends_when_the_client_goes(cluster):  # noqa: F811
    """The apiserver drops its kubelet connection once a `logs -f` client disconnects, even with no output:
    the kubelet stops serving that follow."""
    c = cluster
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "silent"},
             "spec": {"terminationGracePeriodSeconds": 1,
                      "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                                      "command": ["sleep", "3600"]}]}})
    try:
        c.wait_pod("silent", _running)
        before = _logs_in_flight(c)
        p = subprocess.Popen(["kubectl", "logs", "-f", "silent"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE,
                             env=c.env)
        try:
            end = time.monotonic() + 20
            while _logs_in_flight(c) < before + 1 and time.monotonic() < end:
                time.sleep(0.2)
            assert _logs_in_flight(c) == before + 1, "the follow never reached the kubelet"
            assert p.poll() is None, p.communicate()
        finally:
            p.kill()
            p.wait()
        end = time.monotonic() + 15
        while _logs_in_flight(c) > before and time.monotonic() < end:
            time.sleep(0.2)
        assert _logs_in_flight(c) == before, "the apiserver kept following for a client that left"
    finally:
        c.kubectl("delete", "pod", "silent", "--wait=true", "--timeout=60s", check=False)
