"""What real peers leave on a host the first time they run, and how to take it away again.

A peer such as podman creates host state on first use and never removes it (its default cgroup
parent, say). On a machine where the peer ran before, that state is already in the leak check's
first snapshot; on a fresh machine it appears during the run and fails it. The suite must be green
on both, so the tests that run a peer keep such state to themselves, and `make test-fresh` (what CI
runs) removes these artifacts before the session so every run starts as a fresh machine would.

    python -m tests.harness.firstuse            # list what is present
    python -m tests.harness.firstuse --remove   # remove it (nothing that holds a process)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kernel.cgroups import hierarchies

# Cgroup parents real peers create under every hierarchy and never remove.
PEER_CGROUPS = {
    "libpod_parent": "podman's cgroupfs default --cgroup-parent (with conmon/ under it)",
}


@dataclass(frozen=True)
class Artifact:
    what: str
    path: str
    why: str


def _cgroup_busy(path: str) -> bool:
    for dirpath, _, _ in os.walk(path):
        try:
            if Path(dirpath, "cgroup.procs").read_text().strip():
                return True
        except OSError:
            continue
    return False


def present() -> list[Artifact]:
    """The first-use artifacts on this host now."""
    found = []
    for root in hierarchies():
        for name, why in PEER_CGROUPS.items():
            path = os.path.join(root, name)
            if os.path.isdir(path):
                found.append(Artifact("cgroup", path, why))
    if os.path.ismount("/run/netns") and not os.listdir("/run/netns"):
        found.append(Artifact("mount", "/run/netns",
                              "iproute2 makes it a shared bind mount on its first netns"))
    return found


def remove(artifact: Artifact) -> str | None:
    """Remove one artifact; the reason it stays when it cannot (in use), else None."""
    if artifact.what == "cgroup":
        if _cgroup_busy(artifact.path):
            return "processes are still in it"
        for dirpath, _, _ in sorted(os.walk(artifact.path), key=lambda t: -len(t[0])):
            try:
                os.rmdir(dirpath)
            except FileNotFoundError:
                continue
            except OSError as e:
                return f"rmdir {dirpath}: {e.strerror}"
        return None
    if artifact.what == "mount":
        p = subprocess.run(["umount", artifact.path], capture_output=True, text=True, check=False)
        if p.returncode != 0:
            return p.stderr.strip()
        return None
    return f"unknown artifact kind {artifact.what}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.harness.firstuse",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--remove", action="store_true",
                    help="remove them, so the next run starts as on a fresh host")
    args = ap.parse_args(argv)
    arts = present()
    if not arts:
        print("first-use artifacts: none (this host looks fresh)")
        return 0
    for a in arts:
        if not args.remove:
            print(f"present: {a.what} {a.path} ({a.why})")
            continue
        why = remove(a)
        print(f"removed: {a.what} {a.path}" if why is None else f"kept: {a.what} {a.path}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
