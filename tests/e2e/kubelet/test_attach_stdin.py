"""kubectl (1.32) attach with stdin through `nodeagent up`: the apiserver's proxy, the kubelet's Node API,
the runtime's streaming server and the container's stdin FIFO held by its shim. The same flows run with
containerd as the node's runtime, to show the expectations are a real runtime's."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.e2e.kubelet.test_node_api_containerd import ctd_cluster  # noqa: F401 - the fixture
from tests.e2e.kubelet.test_node_up import BUSYBOX, _running, cluster  # noqa: F401 - the fixture
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(params=["nodeagent", "containerd"])
def node(request):
    return request.getfixturevalue("cluster" if request.param == "nodeagent" else "ctd_cluster")


def _say_and_hear(p: subprocess.Popen[str], word: str) -> None:
    """Send a line and read its echo (the session follows the output before it takes input)."""
    assert p.stdin is not None and p.stdout is not None and p.stderr is not None
    p.stdin.write(f"{word}\n")
    p.stdin.flush()
    line = p.stdout.readline()
    assert line == f"got {word}\n", (line, p.stderr.read() if not line else "")


def test_kubectl_attach_stdin(node):
    c = node
    name = unique("att")
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                   "spec": {"terminationGracePeriodSeconds": 1,
                            "containers": [{"name": "main", "image": BUSYBOX, "imagePullPolicy": "Never",
                                            "stdin": True,
                                            "command": ["sh", "-c", "while read x; do echo got $x; done"]}]}})
    try:
        c.wait_pod(name, _running)
        for session in ("a", "b"):  # the end of one session's input is no EOF for the container
            p = subprocess.Popen(["kubectl", "attach", "-i", name], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=c.env)
            assert p.stdin is not None and p.stderr is not None
            try:
                for word in (f"{session}1", f"{session}2"):
                    _say_and_hear(p, word)
                # as containerd does: the end of the client's input ends a (not stdin_once) attach
                p.stdin.close()
                assert p.wait(timeout=60) == 0, p.stderr.read()
            finally:
                p.kill()
                p.wait()
        pod = c.pod(name)
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
        assert "running" in pod["status"]["containerStatuses"][0]["state"]
    finally:
        c.kubectl("delete", "pod", name, "--wait=true", "--timeout=60s", check=False)


def test_kubectl_run_rm_interactive(node):
    """kubectl run -i makes a stdin_once pod: our input, then EOF, and the container exits 0."""
    c = node
    name = unique("run")
    overrides = json.dumps({"apiVersion": "v1", "spec": {"nodeName": c.node}})
    p = subprocess.run(["kubectl", "run", name, "--rm", "-i", "--restart=Never", f"--image={BUSYBOX}",
                        "--image-pull-policy=Never", f"--overrides={overrides}", "--pod-running-timeout=60s",
                        "--", "sh", "-c", "read x; echo got $x; cat; echo eof-seen"],
                       input="hello\nmore\n", capture_output=True, text=True, env=c.env, timeout=120)
    assert "got hello\n" in p.stdout and "more\neof-seen\n" in p.stdout, (p, c.tail())
    assert p.returncode == 0, p
    gone = c.kubectl("get", "pod", name, "--ignore-not-found", "-o", "name")
    assert gone == "", gone
