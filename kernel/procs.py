"""Processes as /proc shows them (no policy)."""

from __future__ import annotations


def alive(pid: int) -> bool:
    """`pid` exists and is not a zombie (a zombie has exited; only its parent's wait() is missing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
