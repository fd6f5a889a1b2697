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
    assert p.stdout is not None
    try:
        deadline = time.monotonic() + 30
        seen = []
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            seen.append(line)
            if "waiting for Ctrl-C" in line or "kubelet: ready" in line:
                break
        p.send_signal(signal.SIGINT)
        try:
            out, _ = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGUSR1)  # every thread's stack, to say where the stop hangs
            time.sleep(2)
            p.kill()
            out, _ = p.communicate()
            pytest.fail("nodeagent up did not stop within 60 s of SIGINT:\n" + "".join(seen) + out)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = "".join(seen) + out
    assert p.returncode == 0, text
    assert "stopped cleanly" in text
