"""Throwaway host resources for tests, each removed when its test ends.

Every factory registers an undo with the session `Janitor` the moment the
resource exists; the fixture runs it at teardown, and the janitor runs anything
still registered at session end (a test interrupted mid-way), before the leak
check looks. Names carry the session's prefix so they never collide with the
host's own objects or with another run.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import random
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from kernel.cgroups import detect_cgroups, hierarchies
from kernel.mounts import mountinfo

SESSION_ID = secrets.token_hex(2)
PREFIX = f"nt{SESSION_ID}"  # 6 chars; link names stay within IFNAMSIZ (15)
_counter = itertools.count(1)


def unique(kind: str = "") -> str:
    """A short host-unique name: nt<session><kind><n>, at most 15 characters."""
    return f"{PREFIX}{kind[:2]}{next(_counter):x}"[:15]


def free_subnet() -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 no interface on the host has an address in (test bridges of concurrent runs)."""
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    for _ in range(100):
        net = ipaddress.IPv4Network(f"10.{random.randint(100, 250)}.{random.randint(0, 255)}.0/24")
        if f" {net.network_address}".rsplit(".", 1)[0] + "." not in used:
            return net
    raise RuntimeError("no free test subnet")


def sh(*argv: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    p = subprocess.run(list(argv), capture_output=True, text=True, input=input, check=False)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


class Janitor:
    """Undo actions keyed by resource, run once each: by the owning fixture or at session end."""

    def __init__(self) -> None:
        self._undo: dict[str, Callable[[], None]] = {}
        self._lock = threading.Lock()

    def register(self, key: str, undo: Callable[[], None]) -> None:
        with self._lock:
            self._undo[key] = undo

    def release(self, key: str) -> None:
        with self._lock:
            undo = self._undo.pop(key, None)
        if undo:
            undo()

    def release_all(self) -> list[str]:
        """Run every pending undo (newest first); return the errors, never raise."""
        errors: list[str] = []
        while True:
            with self._lock:
                if not self._undo:
                    return errors
                key = next(reversed(self._undo))
            try:
                self.release(key)
            except Exception as e:
                errors.append(f"{key}: {e}")

    def pending(self) -> list[str]:
        with self._lock:
            return list(self._undo)


JANITOR = Janitor()


class Resources:
    """The per-test factory: `res.netns()`, `res.veth()`, ... all undone at `close()`."""

    def __init__(self, janitor: Janitor = JANITOR) -> None:
        self._janitor = janitor
        self._keys: list[str] = []

    def _own(self, key: str, undo: Callable[[], None]) -> None:
        self._janitor.register(key, undo)
        self._keys.append(key)

    def close(self) -> None:
        errors = []
        for key in reversed(self._keys):
            try:
                self._janitor.release(key)
            except Exception as e:
                errors.append(f"{key}: {e}")
        self._keys.clear()
        if errors:
            raise RuntimeError("cleanup failed: " + "; ".join(errors))

    # -- network ---------------------------------------------------------------------------------
    def netns(self) -> str:
        """A named network namespace (/run/netns/NAME) with lo up."""
        name = unique("ns")
        sh("ip", "netns", "add", name)
        self._own(f"netns {name}", lambda: _del_netns(name))
        sh("ip", "-n", name, "link", "set", "lo", "up")
        return name

    def veth(self, netns: str | None = None, peer_netns: str | None = None) -> tuple[str, str]:
        """A veth pair; each end optionally moved into a namespace. Returns (host end, peer end)."""
        a, b = unique("va"), unique("vb")
        sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        self._own(f"link {a}", lambda: _del_link(a, netns))
        if peer_netns:
            sh("ip", "link", "set", b, "netns", peer_netns)
        if netns:
            sh("ip", "link", "set", a, "netns", netns)
        return a, b

    def bridge(self, netns: str | None = None) -> str:
        name = unique("br")
        cmd = ["ip"] + (["-n", netns] if netns else []) + ["link", "add", name, "type", "bridge"]
        sh(*cmd)
        self._own(f"link {name}", lambda: _del_link(name, netns))
        return name

    # -- cgroups ---------------------------------------------------------------------------------
    def cgroup(self) -> dict[str, Path]:
        """A fresh cgroup in every v1 hierarchy (or the v2 tree): controller -> path ("unified" for v2)."""
        name = unique("cg")
        info = detect_cgroups()
        paths: dict[str, Path] = {}
        if info.version == "v1":
            seen = set()
            for ctrl, mount in sorted(info.v1_controllers.items()):
                if mount in seen:
                    continue
                seen.add(mount)
                paths[ctrl] = Path(mount, name)
        else:
            paths["unified"] = Path(info.v2_root or "/sys/fs/cgroup", name)
        self._own(f"cgroup {name}", lambda: _remove_cgroups(paths.values()))
        for p in paths.values():
            p.mkdir()
        cpuset = paths.get("cpuset")
        if cpuset:  # v1 cpuset children start empty; inherit so tasks can join
            for f in ("cpuset.cpus", "cpuset.mems"):
                (cpuset / f).write_text((cpuset.parent / f).read_text())
        return paths

    def cgroup_name(self) -> str:
        """A cgroup name for a peer to create (podman's `--cgroup-parent`, say): nothing is made here,
        but `<root>/<name>` is removed from every cgroup hierarchy (named ones too) afterwards."""
        name = unique("cg")
        self._own(f"cgroup {name}", lambda: _remove_cgroups(Path(root, name) for root in hierarchies()))
        return name

    # -- netfilter -------------------------------------------------------------------------------
    def iptables_chain(self, table: str = "filter", backend: str = "legacy") -> str:
        """A user chain in `table` of the legacy or nft iptables backend."""
        name = unique("ch").upper()
        cmd = f"iptables-{backend}"
        sh(cmd, "-w", "-t", table, "-N", name)
        self._own(f"iptables {backend} {table} {name}", lambda: _del_chain(cmd, table, name))
        return name

    def nft_table(self, family: str = "inet") -> str:
        name = unique("nf")
        sh("nft", "add", "table", family, name)
        self._own(f"nft {family} {name}", lambda: _del_nft_table(family, name))
        return name

    # -- mounts and processes ----------------------------------------------------------------------
    def mountpoint(self) -> Path:
        """An empty directory to mount on; unmounted (recursively) and removed afterwards."""
        path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-mnt-"))
        self._own(f"mount {path}", lambda: _unmount_and_remove(path))
        return path

    def process(self, argv: list[str], **kw) -> subprocess.Popen:
        """A child process, killed (with its process group) afterwards."""
        proc = subprocess.Popen(argv, start_new_session=True, **kw)
        self._own(f"process {proc.pid}", lambda: _kill(proc))
        return proc


def _del_netns(name: str) -> None:
    if os.path.exists(f"/run/netns/{name}"):
        sh("ip", "netns", "del", name)


def del_link(name: str) -> None:
    """Delete a link of the host's namespace that a peer (a CNI plugin, a runtime) made; gone is fine."""
    _del_link(name, None)


def _del_link(name: str, netns: str | None) -> None:
    cmd = ["ip"] + (["-n", netns] if netns else []) + ["link", "del", name]
    p = sh(*cmd, check=False)
    gone = "Cannot find device" in p.stderr or "Cannot open network namespace" in p.stderr
    if p.returncode != 0 and not gone:
        # The link may have been moved to another namespace that is already gone: then it is gone too.
        if Path(f"/sys/class/net/{name}").exists():
            raise RuntimeError(f"ip link del {name}: {p.stderr.strip()}")


def _del_chain(cmd: str, table: str, name: str) -> None:
    rules = sh(cmd, "-w", "-t", table, "-S", check=False).stdout.splitlines()
    for rule in rules:
        parts = rule.split()
        if rule.startswith("-A ") and parts[1] != name and f"-j {name}" in rule + " ":
            sh(cmd, "-w", "-t", table, "-D", *parts[1:], check=False)
    sh(cmd, "-w", "-t", table, "-F", name, check=False)
    sh(cmd, "-w", "-t", table, "-X", name, check=False)


def _del_nft_table(family: str, name: str) -> None:
    sh("nft", "delete", "table", family, name, check=False)


def _remove_cgroups(paths: Iterable[Path]) -> None:
    for path in paths:
        remove_cgroup(path)


def remove_cgroup(path: Path) -> None:
    """Kill what is inside, then rmdir bottom-up (cgroup dirs hold only kernel files)."""
    if not path.exists():
        return
    for dirpath, _, _ in sorted(os.walk(path), key=lambda t: -len(t[0])):
        procs = Path(dirpath, "cgroup.procs")
        with contextlib.suppress(OSError):
            for pid in procs.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
        for _ in range(100):
            try:
                os.rmdir(dirpath)
                break
            except FileNotFoundError:
                break
            except OSError:
                import time

                time.sleep(0.02)


def _unmount_and_remove(path: Path) -> None:
    mounted = any(m.point == str(path) or m.point.startswith(f"{path}/") for m in mountinfo())
    if mounted:
        sh("umount", "-R", "-l", str(path), check=False)
    shutil.rmtree(path, ignore_errors=True)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
