"""Interactive exec and attach through `nodeagent up` (apiserver → kubelet → runtime), as a user drives them:
the Python client's `stream()` over websocket (v5.channel.k8s.io: stdin closed on channel 255), kubectl 1.32
(websocket) and Debian's kubectl 1.20 (SPDY) with a slow writer, and attach with output that has no
newline. Every reply must arrive while the client still holds its stdin open: nothing on the path may
buffer to a newline or to the end of input. The same flows run with containerd (1.6) as the node's runtime.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.kubelet.test_node_api_containerd import ctd_cluster  # noqa: F401 - the fixture
from tests.e2e.kubelet.test_node_up import BUSYBOX, _running, cluster  # noqa: F401 - the fixture
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
KUBECTLS = {"1.32": "kubectl", "1.20": str(REPO / ".cache" / "kubectl-1.20" / "usr" / "bin" / "kubectl")}
REPLY_WAIT = 10.0  # generous on a loaded host; the point is that the reply comes while stdin is still open


@pytest.fixture(scope="module", params=["nodeagent", "containerd"])
def node(request):
    return request.getfixturevalue("cluster" if request.param == "nodeagent" else "ctd_cluster")


@pytest.fixture(scope="module")
def shell(node):
    """A running pod to exec into, and one made with stdin that echoes each line without a newline."""
    names = {"exec": unique("sh"), "attach": unique("echo")}
    node.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": names["exec"]},
                "spec": {"terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                                         "command": ["sleep", "3600"]}]}})
    node.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": names["attach"]},
                "spec": {"terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                                         "stdin": True,
                                         "command": ["sh", "-c", 'while read x; do printf "<$x>"; done']}]}})
    for name in names.values():
        node.wait_pod(name, _running)
    yield names
    for name in names.values():
        node.kubectl("delete", "pod", name, "--wait=true", "--timeout=60s", check=False)


def _core(node):
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(node.data_dir / "admin.kubeconfig"))
    return api, client.CoreV1Api(api)


def _read(ws, want: str, channel: int = 1) -> str:
    """What arrives on a channel until it holds `want` or REPLY_WAIT passes."""
    got = ""
    end = time.monotonic() + REPLY_WAIT
    while want not in got and time.monotonic() < end and ws.is_open():
        got += ws.read_channel(channel, timeout=max(0.0, end - time.monotonic()))
    return got


def test_python_client_interactive_exec(node, shell):
    """stream() with stdin: each line written comes back while stdin is still open; closing stdin (v5 CLOSE
    on channel 255) ends `cat`, which exits 0."""
    from kubernetes.stream import stream

    api, core = _core(node)
    try:
        ws = stream(core.connect_get_namespaced_pod_exec, shell["exec"], "default", command=["cat"],
                    stdin=True, stdout=True, stderr=True, tty=False, _preload_content=False)
        try:
            for i in range(3):
                ws.write_stdin(f"line {i}\n")  # str: sent as a text frame, as the client does
                assert _read(ws, f"line {i}\n") == f"line {i}\n"
            ws.write_stdin(b"bytes too\n")  # bytes: a binary frame
            assert _read(ws, "bytes too\n") == "bytes too\n"
            # v5 whatever the runtime speaks: the apiserver translates to SPDY towards the kubelet, as
            # kube-apiserver does (containerd 1.6's own websocket stops at v4)
            assert ws.subprotocol == "v5.channel.k8s.io"
            ws.close_channel(0)
            ws.run_forever(timeout=REPLY_WAIT)
            assert not ws.is_open(), "closing stdin did not end cat"
            assert ws.returncode == 0
        finally:
            ws.close()
    finally:
        api.close()


def test_python_client_attach_sees_partial_output(node, shell):
    """Attach with stdin to a container that answers without a newline: the answer arrives at once."""
    from kubernetes.stream import stream

    api, core = _core(node)
    try:
        ws = stream(core.connect_get_namespaced_pod_attach, shell["attach"], "default", stdin=True,
                    stdout=True, stderr=False, tty=False, _preload_content=False)
        try:
            for word in ("one", "two"):
                ws.write_stdin(f"{word}\n")
                assert _read(ws, f"<{word}>") == f"<{word}>"
        finally:
            ws.close()
    finally:
        api.close()


def _readline(fd: int, buf: bytearray) -> bytes:
    """One line from a pipe, waiting at most REPLY_WAIT (raw reads: no Python buffering in the test)."""
    end = time.monotonic() + REPLY_WAIT
    while b"\n" not in buf:
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
    line, sep, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line + sep


@pytest.mark.parametrize("version", ["1.32", "1.20"])
def test_kubectl_exec_slow_writer(node, shell, version):
    """kubectl exec -i with a writer that waits for each reply before it writes the next line."""
    binary = KUBECTLS[version]
    if version == "1.20" and not Path(binary).exists():
        pytest.skip(f"kubectl 1.20 not unpacked at {binary} (make deps)")
    p = subprocess.Popen([binary, "exec", "-i", shell["exec"], "--", "cat"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=node.env)
    assert p.stdin is not None and p.stdout is not None and p.stderr is not None
    buf = bytearray()
    try:
        for i in range(3):
            p.stdin.write(f"slow {i}\n".encode())
            p.stdin.flush()
            line = _readline(p.stdout.fileno(), buf)
            assert line == f"slow {i}\n".encode(), (line, p.poll())
            time.sleep(0.2)  # the writer is slow: the next line comes later
        p.stdin.close()
        assert p.wait(timeout=60) == 0, p.stderr.read()
    finally:
        p.kill()
        p.wait()
