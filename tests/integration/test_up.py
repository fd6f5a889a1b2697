"""`nodeagent up` starts in the foreground and stops cleanly on Ctrl-C (SIGINT)."""

import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.root


def test_up_starts_and_stops_on_sigint(tmp_path):
    p = subprocess.Popen([sys.executable, "-m", "nodeagent", "up", "--data-dir", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        seen = []
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            seen.append(line)
            if "waiting for Ctrl-C" in line or "kubelet: ready" in line:
                break
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = "".join(seen) + out
    assert p.returncode == 0, text
    assert "stopped cleanly" in text
