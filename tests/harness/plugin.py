"""The suite's pytest plugin: root gating, capability skips, resource fixtures and the leak check.

Loaded with `-p tests.harness.plugin` (pyproject's addopts), so it also applies
to inner pytest runs made by the harness's own tests.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from kernel import syscalls
from tests.harness import hostsnap
from tests.harness.resources import JANITOR, Resources, remove_cgroup

IS_ROOT = os.geteuid() == 0

_state: dict = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("nodeagent")
    group.addoption("--no-leak-check", action="store_true", help="do not compare host state before/after")
    group.addoption("--leak-check-no-reap", action="store_true",
                    help="report leaks but remove nothing (when others share the host)")


def pytest_configure(config: pytest.Config) -> None:
    if IS_ROOT:
        # Orphans of anything the suite starts (daemons, shims, pause processes) re-parent to us,
        # so a process the suite leaks is still seen as ours by the leak check.
        syscalls.prctl(syscalls.PR_SET_CHILD_SUBREAPER, 1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if IS_ROOT:
        return
    skip = pytest.mark.skip(reason="needs root: run the suite as root (make test) for the real-kernel tests")
    for item in items:
        if "root" in item.keywords or "e2e" in item.keywords:
            item.add_marker(skip)


def _leak_check_enabled(session: pytest.Session) -> bool:
    worker = hasattr(session.config, "workerinput")  # an xdist worker: the controller checks
    return IS_ROOT and not session.config.getoption("--no-leak-check") and not worker


def pytest_sessionstart(session: pytest.Session) -> None:
    if _leak_check_enabled(session):
        _prepare_host()
        _state["before"] = hostsnap.snapshot()


def _prepare_host() -> None:
    """One-time host set-up that tools do on first use and never undo, done before the snapshot.

    iproute2 turns /run/netns into a shared bind mount the first time a named netns is made;
    that persistent mount is the host's, not a leak of whichever test happened to come first.
    """
    if not os.path.ismount("/run/netns"):
        name = f"ntprep{os.getpid()}"
        subprocess.run(["ip", "netns", "add", name], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    errors = JANITOR.release_all()
    before = _state.pop("before", None)
    if before is None:
        return
    tr = session.config.pluginmanager.get_plugin("terminalreporter")

    def say(msg: str) -> None:
        if tr:
            tr.write_line(msg, red=True)
        else:
            print(msg)

    found = hostsnap.leaks(before, hostsnap.snapshot())
    procs = hostsnap.descendants(os.getpid())
    procs = {pid: cmd for pid, cmd in procs.items() if not _is_harmless(cmd)}
    if procs:
        found["process"] = [f"{pid} {cmd}" for pid, cmd in sorted(procs.items())]
    for e in errors:
        say(f"LEAK CHECK: cleanup error: {e}")
    if not found:
        return
    say("LEAK CHECK FAILED: the test session left host state behind:")
    for kind, items in found.items():
        for item in items[:50]:
            say(f"  leaked {kind}: {item}")
        if len(items) > 50:
            say(f"  ... and {len(items) - 50} more {kind} entries")
    if not session.config.getoption("--leak-check-no-reap"):
        _reap(found, procs)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _is_harmless(cmd: str) -> bool:
    return False


def _reap(found: dict[str, list[str]], procs: dict[int, str]) -> None:
    """Remove what leaked, so one failed run does not poison the next."""
    for pid in procs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for pid in procs:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)
    for entry in sorted(found.get("mount", []), key=len, reverse=True):
        point = entry.rsplit(" (", 1)[0]
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    for name in found.get("netns", []):
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    for name in found.get("link", []):
        # the kernel's fallback tunnel devices cannot be deleted: down is their clean state
        verb = ["set", name, "down"] if name in hostsnap.KERNEL_FALLBACK_LINKS else ["del", name]
        subprocess.run(["ip", "link", *verb], capture_output=True, check=False)
    for path in sorted(found.get("cgroup", []), key=len, reverse=True):
        remove_cgroup(Path(path))
    for entry in found.get("nftables", []):
        parts = entry.split()
        if parts[1] == "table":
            subprocess.run(["nft", "delete", "table", parts[2], parts[3]], capture_output=True, check=False)
    _reap_iptables(found.get("iptables", []))
    for path in sorted(found.get("file", []), key=len, reverse=True):
        p = Path(path)
        with contextlib.suppress(OSError):
            if p.is_dir() and not p.is_symlink():
                p.rmdir()
            else:
                p.unlink()


def _reap_iptables(entries: list[str]) -> None:
    chains = []
    for entry in entries:
        save_cmd, table, rest = entry.split(" ", 2)
        cmd = save_cmd.removesuffix("-save")
        if rest.startswith("chain "):
            chains.append((cmd, table, rest.split()[1]))
        elif rest.startswith("-A "):
            subprocess.run([cmd, "-w", "-t", table, "-D", *rest.split()[1:]],
                           capture_output=True, check=False)
    for cmd, table, chain in chains:
        subprocess.run([cmd, "-w", "-t", table, "-F", chain], capture_output=True, check=False)
    for cmd, table, chain in chains:
        subprocess.run([cmd, "-w", "-t", table, "-X", chain], capture_output=True, check=False)


# -- fixtures --------------------------------------------------------------------------------------


@pytest.fixture
def res():
    """Per-test host resources (netns, veth, bridge, cgroup, chains, nft tables, mounts, processes)."""
    r = Resources()
    try:
        yield r
    finally:
        r.close()


@pytest.fixture(scope="session")
def host():
    """The capability probe's report for this host."""
    from kernel.probe import probe_host

    return probe_host()


@pytest.fixture
def require(host):
    """`require("nftables")` skips the test, with the probe's reason, when the kernel lacks a feature."""

    def _require(*features: str) -> None:
        for f in features:
            if not host.has(f):
                pytest.skip(f"host lacks {f}: {host.why_not(f)}")

    return _require


@pytest.fixture(scope="session")
def images(tmp_path_factory):
    """Locally built test images (OCI layouts and docker-archive tarballs) from busybox-static."""
    from nodeagent.testing.images import ImageFactory

    return ImageFactory(tmp_path_factory.mktemp("images"))
