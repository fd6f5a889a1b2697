"""A real `nodeagent server` (memory store) shared by a module's tests, and the two real kubectls."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from nodeagent.testing.apiserver import start_server

REPO = Path(__file__).resolve().parents[3]
MANIFESTS = Path(__file__).parent / "manifests"
KUBECTL_132 = shutil.which("kubectl") or "/usr/bin/kubectl"
KUBECTL_120 = str(REPO / ".cache/kubectl-1.20/usr/bin/kubectl")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("apiserver"), "sqlite")
    yield srv
    rc = srv.stop()
    assert rc == 0, srv.log()


class Kubectl:
    def __init__(self, binary: str, server, version: str) -> None:
        self.binary = binary
        self.server = server
        self.version = version  # "1.32" or "1.20"

    def run(self, *args: str, input: str | None = None, check: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess:
        p = subprocess.run([self.binary, *args], input=input, capture_output=True, text=True,
                           env=self.server.env(), timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    def __call__(self, *args: str, **kw) -> str:
        return self.run(*args, **kw).stdout


@pytest.fixture(params=["1.32", "1.20"])
def kubectl(request, server):
    binary = KUBECTL_132 if request.param == "1.32" else KUBECTL_120
    if not Path(binary).exists():
        pytest.skip(f"kubectl {request.param} not found at {binary} (run make install)")
    return Kubectl(binary, server, request.param)
