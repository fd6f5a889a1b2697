"""Real kubectl (1.32 from the machine, 1.20 from Debian) doing exec and port-forward against the
runtime's streaming server, through a minimal apiserver that relays the upgrade byte-for-byte."""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import io
import os
import re
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from cri.proto import api_pb2 as pb
from tests.integration.cri.conftest import Pods
from tests.integration.cri.kube_front import KubeFront

pytestmark = pytest.mark.root

ROOT = Path(__file__).resolve().parents[3]
KUBECTLS = {"1.32": Path("/usr/bin/kubectl"), "1.20": ROOT / ".cache/kubectl-1.20/usr/bin/kubectl"}


def _truthy(q: dict, key: str) -> bool:
    return (q.get(key) or ["false"])[0] in ("true", "1")


class Front(KubeFront):
    """The front with what the tests drive through it: the pod behind it and kubectl's environment."""

    ids: dict[str, str]  # container name -> id (what attach streams)
    pods: Pods
    sid: str
    scfg: pb.PodSandboxConfig
    env: dict[str, str]
    cache: str
    hostname: str
    big_md5: str


@pytest.fixture(scope="module")
def front(cri, tmp_path_factory):
    """The front, a pod running busybox httpd on the pod's 127.0.0.1:8080, and a kubeconfig."""
    pods = Pods(cri, tmp_path_factory.mktemp("kpods"))
    sid, scfg = pods.run()
    cid = pods.container(sid, scfg, ["httpd", "-f", "-p", "127.0.0.1:8080", "-h", "/etc"])
    for _ in range(50):
        got = cri.client.exec_sync(cid, ["wget", "-q", "-O", "-", "http://127.0.0.1:8080/hostname"])
        if got.exit_code == 0:
            break
        time.sleep(0.1)
    # 3 MiB to download: many times the 64 KiB SPDY windows
    assert cri.client.exec_sync(cid, ["sh", "-c", "head -c 3145728 /dev/urandom > /etc/big"]).exit_code == 0
    big = cri.client.exec_sync(cid, ["md5sum", "/etc/big"]).stdout.split()[0].decode()
    cl = cri.client

    def stream_url(verb: str, q: dict) -> str:
        if verb == "exec":
            return cl.exec(cid, q["command"], tty=_truthy(q, "tty"), stdin=_truthy(q, "stdin"),
                           stdout=_truthy(q, "stdout"), stderr=_truthy(q, "stderr"))
        if verb == "attach":
            return cl.attach(f.ids[q["container"][0]], stdout=_truthy(q, "stdout"),
                             stderr=_truthy(q, "stderr"))
        return cl.port_forward(sid)

    f = Front(stream_url)
    f.ids = {"c": cid}
    f.pods, f.sid, f.scfg = pods, sid, scfg
    loop = asyncio.new_event_loop()
    t = threading.Thread(target=loop.run_forever, daemon=True)
    t.start()
    asyncio.run_coroutine_threadsafe(f.start(), loop).result(10)
    tmp = tmp_path_factory.mktemp("kubectl")
    (tmp / "kubeconfig").write_text(f.kubeconfig())
    f.env = dict(os.environ, KUBECONFIG=str(tmp / "kubeconfig"), HOME=str(tmp))
    f.cache = str(tmp / "cache")
    f.hostname = scfg.hostname
    f.big_md5 = big
    try:
        yield f
    finally:
        asyncio.run_coroutine_threadsafe(f.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        t.join(5)
        pods.close()


def _kubectl(version: str) -> str:
    path = KUBECTLS[version]
    if not path.exists():
        pytest.skip(f"kubectl {version} not found at {path} (make install unpacks Debian's 1.20)")
    return str(path)


def _run(front, version: str, args: list[str], extra_env: dict | None = None, stdin: bytes | None = None):
    cmd = [_kubectl(version), "--cache-dir", front.cache, *args]
    return subprocess.run(cmd, input=stdin, capture_output=True, timeout=60,
                          env=dict(front.env, **(extra_env or {})))


@pytest.mark.parametrize("version", ["1.32", "1.20"])
def test_kubectl_exec_over_spdy(front, version):
    env = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false"}  # 1.32 would use websockets first
    before = len(front.upgrades)
    r = _run(front, version, ["exec", "p", "--", "sh", "-c", "echo out; echo err >&2; exit 3"], env)
    assert r.returncode == 3, r.stderr
    assert r.stdout == b"out\n" and b"err\n" in r.stderr
    r = _run(front, version, ["exec", "-i", "p", "--", "sh", "-c", "wc -c; cat"], env, stdin=b"x" * 200000)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split(b"\n", 1)[0].strip() == b"200000"  # stdin's FIN reached the command
    assert [u for _, u in front.upgrades[before:]] == ["SPDY/3.1", "SPDY/3.1"]


def _port_forward(front, version: str, env: dict) -> list[bytes]:
    cmd = [_kubectl(version), "--cache-dir", front.cache, "port-forward", "pod/p", ":8080"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(front.env, **env))
    assert p.stdout is not None and isinstance(p.stderr, io.BufferedReader)
    try:
        line = p.stdout.readline().decode()
        m = re.search(r"127\.0\.0\.1:(\d+) -> 8080", line)
        assert m, (line, p.stderr.read1(4096) if p.poll() is not None else b"")
        url = f"http://127.0.0.1:{m.group(1)}/hostname"

        def get(_):
            with urllib.request.urlopen(url, timeout=20) as resp:
                return resp.read()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            bodies = list(pool.map(get, range(6)))
        with urllib.request.urlopen(url.replace("/hostname", "/big"), timeout=60) as resp:
            bodies.append(hashlib.md5(resp.read()).hexdigest().encode())
        return bodies
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.mark.parametrize("version,env,upgrade", [
    ("1.32", {}, "websocket"),  # SPDY tunnelled in a websocket: kubectl's default since 1.31
    ("1.32", {"KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"}, "SPDY/3.1"),
    ("1.20", {}, "SPDY/3.1"),
])
def test_kubectl_port_forward(front, version, env, upgrade):
    before = len(front.upgrades)
    bodies = _port_forward(front, version, env)
    assert bodies[:6] == [front.hostname.encode() + b"\n"] * 6
    assert bodies[6] == front.big_md5.encode()
    assert [u.lower() for _, u in front.upgrades[before:]] == [upgrade.lower()]


@pytest.mark.parametrize("version", ["1.32", "1.20"])
def test_kubectl_attach_over_spdy(front, version):
    """kubectl attach follows a running container's output until it exits, then reports its exit code."""
    name = "talk" + version.replace(".", "")
    talk = "i=0; while [ ! -e /tmp/stop ]; do i=$((i+1)); echo out$i; echo err$i >&2; sleep 0.2; done; exit 5"
    cid = front.pods.container(front.sid, front.scfg, ["sh", "-c", talk], name=name)
    front.ids[name] = cid
    front.containers.append(name)
    cmd = [_kubectl(version), "--cache-dir", front.cache, "attach", "p", "-c", name]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=dict(front.env, KUBECTL_REMOTE_COMMAND_WEBSOCKETS="false"))
    assert p.stdout is not None and isinstance(p.stderr, io.BufferedReader)
    try:
        line = p.stdout.readline()
        assert re.fullmatch(rb"out\d+\n", line), (line, p.stderr.read1(4096) if p.poll() is not None else b"")
        assert front.pods.c.exec_sync(cid, ["touch", "/tmp/stop"]).exit_code == 0
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 5, err
    assert re.search(rb"err\d+\n", err)
    assert front.upgrades[-1] == ("attach", "SPDY/3.1")
