"""The leak check is proven to work: deliberately leaking inner sessions make it fail."""

import os
import subprocess
from pathlib import Path

import pytest

from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]


def _run_inner(pytester, monkeypatch, body: str):
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    pytester.makepyfile(test_inner=body)
    return pytester.runpytest_subprocess("-p", "tests.harness.plugin", "-p", "no:cacheprovider", "-q")


def test_leaking_netns_fails_the_run(pytester, monkeypatch):
    name = unique("lk")
    try:
        result = _run_inner(pytester, monkeypatch, f"""
import subprocess
def test_leaks():
    subprocess.run(["ip", "netns", "add", "{name}"], check=True)
""")
        out = result.stdout.str()
        assert result.ret != 0, out
        assert "LEAK CHECK FAILED" in out
        assert f"leaked netns: {name}" in out
        assert "1 passed" in out  # the test itself passed: only the leak check failed the run
        assert not os.path.exists(f"/run/netns/{name}"), "the leak check must also reap what leaked"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def test_leaking_process_and_link_fail_the_run(pytester, monkeypatch):
    link = unique("lk")
    try:
        result = _run_inner(pytester, monkeypatch, f"""
import subprocess
def test_leaks():
    subprocess.Popen(["sleep", "600"], start_new_session=True)
    subprocess.run(["ip", "link", "add", "{link}", "type", "bridge"], check=True)
""")
        out = result.stdout.str()
        assert result.ret != 0, out
        assert "leaked process:" in out and "sleep 600" in out
        assert f"leaked link: {link}" in out
    finally:
        subprocess.run(["ip", "link", "del", link], capture_output=True)


def test_leaking_cgroup_and_chain_fail_the_run(pytester, monkeypatch):
    from kernel.cgroups import detect_cgroups

    info = detect_cgroups()
    root = info.v1_controllers.get("pids") if info.version == "v1" else info.v2_root
    assert root, info.summary
    cg = Path(root, unique("lk"))
    chain = unique("lk").upper()
    try:
        result = _run_inner(pytester, monkeypatch, f"""
import os, subprocess
def test_leaks():
    os.mkdir("{cg}")
    subprocess.run(["iptables-legacy", "-w", "-N", "{chain}"], check=True)
""")
        out = result.stdout.str()
        assert result.ret != 0, out
        assert f"leaked cgroup: {cg}" in out
        assert f"chain {chain}" in out
        assert not cg.exists()
    finally:
        if cg.exists():
            cg.rmdir()
        subprocess.run(["iptables-legacy", "-w", "-X", chain], capture_output=True)


def test_clean_session_passes(pytester, monkeypatch):
    result = _run_inner(pytester, monkeypatch, """
def test_uses_fixtures(res):
    ns = res.netns()
    a, b = res.veth(peer_netns=ns)
    res.bridge()
    res.cgroup()
""")
    out = result.stdout.str()
    assert result.ret == 0, out
    assert "LEAK CHECK" not in out


def test_interrupted_fixture_is_cleaned_by_the_janitor(pytester, monkeypatch):
    # A test killed mid-way (here: the whole inner run aborts with pytest.exit) still gets its
    # fixture-made resources removed at session end, so the leak check stays green.
    result = _run_inner(pytester, monkeypatch, """
import pytest
def test_aborts(res):
    res.netns()
    res.bridge()
    pytest.exit("simulated interrupt", returncode=3)
""")
    out = result.stdout.str()
    assert "LEAK CHECK FAILED" not in out, out
