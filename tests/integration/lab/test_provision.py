"""The lab's provisioning scripts, run for real on this machine twice in a row.

Every path they write is redirected under a tmp root (LAB_ROOT), the project is this checkout
(LAB_SRC), and `systemctl` is minisystemctl, which runs the written units' ExecStart as real
processes: the CRI daemon and the apiserver really start from the units, and the second run must
change nothing (same files, same checksums, no start/restart/enable, same pids) with the node
still answering.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[3]
PROVISION = REPO / "vagrant" / "provision"
SHIM = Path(__file__).with_name("minisystemctl.py")
KUBECTL = REPO / ".cache" / "kubectl-1.20" / "usr" / "bin" / "kubectl"
SERVICES = ("nodeagent-server.service", "nodeagent-agent.service", "nodeagent-cri.service")
# Written by the daemons themselves, not by provisioning.
RUNTIME_STATE = ("var", "run", "sysd", "share")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def manifest(root: Path) -> dict[str, str]:
    """Every path provisioning wrote under root: file mode + sha256, or symlink target, or dir."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        if rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d not in RUNTIME_STATE]
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = str(rel_dir / name)
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "-> " + os.readlink(p)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = f"dir {stat.S_IMODE(st.st_mode):o}"
            else:
                out[rel] = f"{stat.S_IMODE(st.st_mode):o} {hashlib.sha256(p.read_bytes()).hexdigest()}"
    return out


class Lab:
    """One tmp system root and the environment that points the scripts at it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.sysd = root / "sysd"
        self.env = {
            **os.environ,
            "LAB_ROOT": str(root), "LAB_SRC": str(REPO), "LAB_SHARE": str(root / "share"),
            "LAB_CP_IP": "127.0.0.1", "LAB_BIND_ADDRESS": "127.0.0.1", "LAB_SERVER_PORT": str(free_port()),
            "LAB_READY_TIMEOUT": "120", "LAB_JOIN_TIMEOUT": "5",
            "LAB_UNIT_DIR": str(root / "etc/systemd/system"), "MINISYSTEMCTL_STATE": str(self.sysd),
            "SYSTEMCTL": str(SHIM),
        }

    def run(self, script: str, **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(PROVISION / script)], env={**self.env, **extra},
                              capture_output=True, text=True, timeout=600)

    def ok(self, script: str, **extra: str) -> str:
        p = self.run(script, **extra)
        assert p.returncode == 0, f"{script} failed:\n{p.stdout}\n{p.stderr}"
        return p.stdout

    def calls(self) -> list[str]:
        log = self.sysd / "calls.log"
        return log.read_text().splitlines() if log.exists() else []

    def pid(self, unit: str) -> int | None:
        f = self.sysd / f"{unit}.pid"
        return int(f.read_text()) if f.exists() else None

    def kubectl(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(KUBECTL), "--kubeconfig",
                               str(self.root / "etc/nodeagent/admin.kubeconfig"),
                               *args], capture_output=True, text=True, timeout=60)

    def stop_all(self) -> list[int]:
        pids = [p for u in SERVICES if (p := self.pid(u))]
        for unit in SERVICES:
            subprocess.run([sys.executable, str(SHIM), "stop", unit], env=self.env, timeout=60)
        for pid in pids:  # belt and braces: nothing of ours may survive the test
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return pids


@pytest.fixture
def lab():
    # A short root: the CRI socket path must fit a unix socket address.
    root = Path(tempfile.mkdtemp(prefix="lab", dir="/tmp"))
    lab = Lab(root)
    try:
        yield lab
    finally:
        pids = lab.stop_all()
        shutil.rmtree(root, ignore_errors=True)
        time.sleep(0.2)
        for pid in pids:
            proc_stat = Path(f"/proc/{pid}/stat")
            zombie = proc_stat.parent.exists() and proc_stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
            assert not proc_stat.parent.exists() or zombie, f"pid {pid} survived"


def changes(out: str) -> list[str]:
    return [line for line in out.splitlines() if ": changed: " in line]


@pytest.mark.skipif(not KUBECTL.exists(), reason="make install unpacks kubectl 1.20 into .cache")
def cp_role(lab: Lab) -> str:
    """What the Vagrantfile runs on cp: common, server, then the agent when the build can join."""
    return lab.ok("common.sh") + lab.ok("server.sh") + lab.ok("agent.sh", LAB_JOIN_OPTIONAL="1")


def test_control_plane_provisioning_twice_changes_nothing_and_node_works(lab):
    first = cp_role(lab)
    # The join flow exists when the server printed a join command for the workers.
    has_agent = (lab.root / "share/join-command").exists()
    assert changes(first), first
    units = lab.root / "etc/systemd/system"
    cri_unit = (units / "nodeagent-cri.service").read_text()
    assert f"ExecStart={REPO}/.venv/bin/nodeagent cri --socket {lab.root}/run/nodeagent/cri.sock" in cri_unit
    assert "KillMode=process" in cri_unit
    server_unit = (units / "nodeagent-server.service").read_text()
    assert f"--port {lab.env['LAB_SERVER_PORT']}" in server_unit
    assert (units / "multi-user.target.wants/nodeagent-server.service").is_symlink()
    assert (lab.root / "run/nodeagent/cri.sock").is_socket()
    assert os.readlink(lab.root / "usr/local/bin/nodeagent") == f"{REPO}/.venv/bin/nodeagent"
    assert stat.S_IMODE((lab.root / "etc/nodeagent/admin.kubeconfig").stat().st_mode) == 0o600
    ready = lab.kubectl("get", "--raw", "/readyz")
    assert ready.returncode == 0 and ready.stdout.strip() == "ok", ready
    before = manifest(lab.root)
    pids = {u: lab.pid(u) for u in SERVICES}
    calls = len(lab.calls())

    second = cp_role(lab)
    assert changes(second) == [], second
    assert second.count("done (nothing to change)") == (3 if has_agent else 2), second
    assert manifest(lab.root) == before
    new_calls = lab.calls()[calls:]
    changing = ("start", "restart", "stop", "enable", "daemon-reload")
    assert not [c for c in new_calls if c.split()[0] in changing], new_calls
    assert {u: lab.pid(u) for u in SERVICES} == pids
    # The node still works: the same processes answer.
    for unit in ("nodeagent-cri.service", "nodeagent-server.service"):
        assert subprocess.run([str(SHIM), "is-active", unit], env=lab.env).returncode == 0, unit
    ready = lab.kubectl("get", "--raw", "/readyz")
    assert ready.returncode == 0 and ready.stdout.strip() == "ok", ready
    ns = lab.kubectl("get", "namespaces", "-o", "name")
    assert ns.returncode == 0 and "namespace/default" in ns.stdout, ns

    join_file = lab.root / "share/join-command"
    if not has_agent:
        assert "no join command" in second
        assert "this node does not join" in second
        assert not join_file.exists()
        return
    # With the join flow built: the join command reaches the shared folder and cp's own agent joins.
    assert join_file.read_text().startswith("nodeagent agent --server https://")
    assert subprocess.run([str(SHIM), "is-active", "nodeagent-agent.service"], env=lab.env).returncode == 0
    # it joined as itself, with the lab's state dir and CRI daemon (no second runtime, no host default paths)
    end = time.monotonic() + 90
    while (nodes := lab.kubectl("get", "nodes", "-o", "name")).stdout.strip() == "":
        assert time.monotonic() < end, (lab.root / "var/log/nodeagent/agent.log").read_text(errors="replace")
        time.sleep(0.5)
    assert nodes.stdout.startswith("node/"), nodes
    assert (lab.root / "var/lib/nodeagent/kubelet.kubeconfig").exists()
    agent_log = (lab.root / "var/log/nodeagent/agent.log").read_text(errors="replace")
    assert "not starting ours" in agent_log, agent_log


JOIN = ("nodeagent agent --server https://192.168.56.10:6443 --token abcdef.0123456789abcdef "
        "--ca-cert-hash sha256:" + "ab" * 32 + "\n")


def test_worker_provisioning_twice_changes_nothing(lab):
    share = lab.root / "share"
    share.mkdir()
    (share / "join-command").write_text(JOIN)
    first = lab.ok("agent.sh", LAB_START="0")
    assert changes(first), first
    env = (lab.root / "etc/nodeagent/join.env").read_text()
    assert "JOIN_SERVER=https://192.168.56.10:6443\n" in env and "JOIN_TOKEN=abcdef.0123456789abcdef\n" in env
    assert stat.S_IMODE((lab.root / "etc/nodeagent/join.env").stat().st_mode) == 0o600
    unit = (lab.root / "etc/systemd/system/nodeagent-agent.service").read_text()
    assert "agent --server ${JOIN_SERVER} --token ${JOIN_TOKEN} --ca-cert-hash ${JOIN_CA_CERT_HASH}" in unit
    assert "abcdef.0123456789abcdef" not in unit  # the token stays in the 0600 env file
    before = manifest(lab.root)

    second = lab.ok("agent.sh", LAB_START="0")
    assert changes(second) == [], second
    assert manifest(lab.root) == before

    # A new join command (a re-created control plane) is picked up.
    (share / "join-command").write_text(JOIN.replace("abcdef.0123456789abcdef", "uvwxyz.0123456789abcdef"))
    third = lab.ok("agent.sh", LAB_START="0")
    assert [c for c in changes(third) if "join.env" in c], third
    assert "JOIN_TOKEN=uvwxyz.0123456789abcdef" in (lab.root / "etc/nodeagent/join.env").read_text()


@pytest.mark.parametrize("content, why", [
    ("", "gave up after"),
    ("nodeagent agent --server http://1.2.3.4:6443 --token a.b\n",
     "no valid --server (got 'http://1.2.3.4:6443')"),
    ("nodeagent agent --server https://1.2.3.4:6443 --token 'a;rm -rf /'\n", "no valid --token"),
    ("nodeagent agent --server https://1.2.3.4:6443 --token a.b --ca-cert-hash md5:00\n",
     "invalid --ca-cert-hash"),
])
def test_worker_refuses_a_missing_or_bad_join_command(lab, content, why):
    share = lab.root / "share"
    share.mkdir()
    (share / "join-command").write_text(content)
    p = lab.run("agent.sh", LAB_START="0", LAB_JOIN_TIMEOUT="2")
    assert p.returncode != 0
    assert why in p.stderr, p.stderr
    assert not (lab.root / "etc/nodeagent/join.env").exists()
    assert not (lab.root / "etc/systemd/system/nodeagent-agent.service").exists()


def test_the_hosts_registries_file_reaches_the_runtime(lab):
    """The Vagrantfile hands the host's registries.yaml in (base64): common.sh installs it privately and
    the runtime's unit reads it with --registries."""
    import base64

    text = "mirrors:\n  docker.io:\n    endpoint: [\"http://192.168.56.1:5000\"]\n"
    lab.ok("common.sh", LAB_START="0", LAB_SKIP_MAKE="1",
           LAB_REGISTRIES_B64=base64.b64encode(text.encode()).decode())
    regs = lab.root / "etc/nodeagent/registries.yaml"
    assert regs.read_text() == text
    assert stat.S_IMODE(regs.stat().st_mode) == 0o600
    unit = (lab.root / "etc/systemd/system/nodeagent-cri.service").read_text()
    assert f"--registries {regs}" in unit, unit
    unit_without = lab.ok("common.sh", LAB_START="0", LAB_SKIP_MAKE="1", LAB_REGISTRIES_B64="")
    assert "--registries" not in (lab.root / "etc/systemd/system/nodeagent-cri.service").read_text(), \
        unit_without
