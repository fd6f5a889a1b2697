"""Start and stop a CRI runtime process for tests: one place for both our daemon and containerd."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from cri.client import CRIClient
from kernel.mounts import mountinfo


def start_runtime(argv: list[str], log: Path, socket: str, *, env: dict[str, str] | None = None,
                  new_session: bool = False) -> tuple[subprocess.Popen, CRIClient]:
    """Start a runtime and wait until its CRI socket answers Version;
    on failure kill it and raise with its log."""
    proc = subprocess.Popen(argv, stdout=open(log, "ab"), stderr=subprocess.STDOUT, env=env,
                            start_new_session=new_session)
    client = CRIClient(socket)
    try:
        client.wait_ready(60)
    except Exception:
        client.close()
        stop_process(proc, grace=0)
        raise RuntimeError(f"{argv[0]} did not start:\n{Path(log).read_text()[-3000:]}") from None
    return proc, client


def stop_process(proc: subprocess.Popen | None, grace: float) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds (0: SIGKILL at once, as kill -9 would)."""
    if proc is None or proc.poll() is not None:
        return
    if grace <= 0:
        proc.kill()
        proc.wait()
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def mounts_under(path: Path) -> list[str]:
    p = str(path)
    return [m.point for m in mountinfo() if m.point.startswith(p)]
