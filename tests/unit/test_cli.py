import json
import os
import shutil
import subprocess
import sys

import pytest

from nodeagent.cli import COMMANDS, main


def test_version_text(capsys):
    assert main(["version"]) == 0
    assert capsys.readouterr().out.startswith("nodeagent 0.1.0")


def test_version_json(capsys):
    assert main(["version", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == "0.1.0"


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"kubectl"}))
def test_every_command_has_help(command):
    p = subprocess.run([sys.executable, "-m", "nodeagent", command, "--help"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "usage: nodeagent" in p.stdout


def test_kubectl_help_is_kubectls():
    """`nodeagent kubectl` passes every argument on, as `k3s kubectl` does: its --help is kubectl's."""
    p = subprocess.run([sys.executable, "-m", "nodeagent", "kubectl", "--help"], capture_output=True,
                       text=True, env={**os.environ, "KUBECONFIG": "/dev/null"})
    if shutil.which("kubectl") is None:
        assert p.returncode == 1 and "no kubectl on PATH" in p.stderr
    else:
        assert p.returncode == 0, p.stderr
        assert "kubectl controls the Kubernetes cluster manager" in p.stdout


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_unknown_command_is_an_error():
    p = subprocess.run([sys.executable, "-m", "nodeagent", "frobnicate"], capture_output=True, text=True)
    assert p.returncode == 2
    assert "invalid choice" in p.stderr
