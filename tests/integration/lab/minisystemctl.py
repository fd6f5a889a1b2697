#!/usr/bin/env python3
"""A tiny stand-in for `systemctl`, so the lab's provisioning can run for real on a machine without
systemd: it reads the unit files the scripts wrote and runs their ExecStart as real processes.

Only what the provisioning uses: daemon-reload, enable, is-enabled, is-active, start, stop, restart.
Units come from $LAB_UNIT_DIR; pids, and a log of every call, live in $MINISYSTEMCTL_STATE.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

UNIT_DIR = Path(os.environ["LAB_UNIT_DIR"])
STATE = Path(os.environ["MINISYSTEMCTL_STATE"])


def parse_unit(name: str) -> dict[str, dict[str, str]]:
    """[Section] -> {key: value}; later keys win, as in systemd for single-valued keys."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for raw in (UNIT_DIR / name).read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        key, _, value = line.partition("=")
        current[key.strip()] = value.strip()
    return sections


def env_file(path: str) -> dict[str, str]:
    env = {}
    for raw in Path(path.lstrip("-")).read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            k, _, v = line.partition("=")
            env[k.strip()] = v.strip()
    return env


def pid_of(name: str) -> int | None:
    try:
        pid = int((STATE / f"{name}.pid").read_text())
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ValueError, IndexError):
        return None
    return None if state in ("Z", "X") else pid


def start(name: str) -> int:
    service = parse_unit(name).get("Service", {})
    env = env_file(service["EnvironmentFile"]) if "EnvironmentFile" in service else {}
    line = re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), service["ExecStart"])
    out: int | IO[bytes] = subprocess.DEVNULL
    target = service.get("StandardOutput", "")
    if target.startswith("append:"):
        Path(target[7:]).parent.mkdir(parents=True, exist_ok=True)
        out = open(target[7:], "ab")
    p = subprocess.Popen(shlex.split(line), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                         start_new_session=True, env={**os.environ, **env})
    (STATE / f"{name}.pid").write_text(str(p.pid))
    return 0


def stop(name: str) -> int:
    pid = pid_of(name)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while pid_of(name) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_of(name) is not None:
            os.kill(pid, signal.SIGKILL)
    (STATE / f"{name}.pid").unlink(missing_ok=True)
    return 0


def enable(name: str) -> int:
    for target in parse_unit(name).get("Install", {}).get("WantedBy", "").split():
        link = UNIT_DIR / f"{target}.wants" / name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(UNIT_DIR / name)
            print(f"Created symlink {link} -> {UNIT_DIR / name}.")
    return 0


def is_enabled(name: str) -> int:
    return 0 if any(UNIT_DIR.glob(f"*.wants/{name}")) else 1


def main(argv: list[str]) -> int:
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "calls.log", "a") as f:
        f.write(shlex.join(argv) + "\n")
    args = [a for a in argv if not a.startswith("-")]
    verb, names = args[0], args[1:]
    if verb == "daemon-reload":
        return 0
    if verb == "is-active":
        return 0 if all(pid_of(n) is not None for n in names) else 3
    if verb == "restart":
        return max(stop(n) or start(n) for n in names)
    actions = {"start": start, "stop": stop, "enable": enable, "is-enabled": is_enabled}
    if verb not in actions:
        print(f"minisystemctl: unsupported verb {verb}", file=sys.stderr)
        return 2
    return max(actions[verb](n) for n in names)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
