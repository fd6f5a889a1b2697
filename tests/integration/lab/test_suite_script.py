"""vagrant/provision/suite.sh (LAB_TEST=1) runs the privileged subset, not the whole suite; LAB_TEST_SUITE
overrides it. Run for real here with tiny selections (the default one needs the lab's IPVS and cgroup v2)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.root

REPO = Path(__file__).resolve().parents[3]
SUITE = REPO / "vagrant" / "provision" / "suite.sh"


def run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "LAB_ROOT": str(tmp_path), "LAB_SRC": str(REPO), "MAKE": "false", **env}
    return subprocess.run(["bash", str(SUITE)], env=full, capture_output=True, text=True, timeout=600)


def test_default_subset_is_the_lab_only_part_not_make_test():
    text = SUITE.read_text()
    m = re.search(r'LAB_TEST_DEFAULT_SUITE="(.*?)"\n', text, re.S)
    assert m, "the suite script sets LAB_TEST_DEFAULT_SUITE"
    default = m.group(1).replace("\\\n", "")
    selections = [s.strip() for s in default.split(";")]
    assert selections == ["tests/integration/netproxy/test_dataplane.py -k ipvs",
                          "tests/unit/cri/test_cgroups.py tests/integration/cri/test_lifecycle.py "
                          "tests/integration/cri/test_cgroup_failures.py",
                          "tests/conformance/cri -k nodeagent"]
    for s in selections:
        for word in s.split():
            if word.startswith("tests/"):
                assert (REPO / word).exists(), word
    # every default selection collects tests in this checkout
    for s in selections:
        argv = s.split()
        p = subprocess.run([str(REPO / ".venv/bin/python"), "-m", "pytest", "--collect-only", "-q",
                            "--no-leak-check",
                            *argv], cwd=REPO, capture_output=True, text=True, timeout=300)
        collected = re.search(r"\b[1-9]\d* (tests )?(collected|selected)", p.stdout)
        assert p.returncode == 0 and collected, p.stdout[-2000:]


def test_selections_run_one_by_one_with_shell_quoting_and_the_log_keeps_them(tmp_path):
    p = run(tmp_path, LAB_TEST="1", LAB_TEST_ARGS="--no-leak-check -q",
            LAB_TEST_SUITE="tests/unit/netlab/test_topology.py -k 'bounded or underlay'; "
                           "tests/unit/nodenet/test_podcidr.py -k node_pod_cidr")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "the privileged subset passed" in p.stdout
    log = (tmp_path / "var/log/nodeagent/suite.log").read_text()
    assert "2 passed, 2 deselected" in log and "1 passed" in log, log
    assert "make test" not in p.stdout


def test_no_extra_arguments_adds_no_empty_one(tmp_path):
    """LAB_TEST_ARGS unset (the lab's default) must not hand pytest an empty argument, which it reads as the
    rootdir: the lab then ran the whole suite instead of the selection."""
    p = run(tmp_path, LAB_TEST="1", LAB_TEST_ARGS="",
            LAB_TEST_SUITE="tests/unit/nodenet/test_podcidr.py -k node_pod_cidr --no-leak-check")
    assert p.returncode == 0, p.stdout + p.stderr
    log = (tmp_path / "var/log/nodeagent/suite.log").read_text()
    collected = re.search(r"collected (\d+) items", log)
    assert collected and int(collected.group(1)) < 100, log[-2000:]
    assert "1 passed" in log, log[-2000:]


def test_a_failing_selection_fails_the_step_after_running_the_rest(tmp_path):
    p = run(tmp_path, LAB_TEST="1", LAB_TEST_ARGS="--no-leak-check -q",
            LAB_TEST_SUITE="tests/unit/netlab/test_topology.py -k no_such_test_name; "
                           "tests/unit/nodenet/test_podcidr.py -k node_pod_cidr")
    assert p.returncode != 0
    assert "the privileged subset failed: tests/unit/netlab/test_topology.py -k no_such_test_name" in p.stderr
    assert "1 passed" in (tmp_path / "var/log/nodeagent/suite.log").read_text()


def test_keep_going_records_the_failure_and_lets_provisioning_go_on(tmp_path):
    """In the lab cp's server and agent must still start after a failed suite (the workers wait for its join
    command); the verdict file is how the cp trigger and make lab-test report the failure."""
    result = tmp_path / "var/log/nodeagent/suite.result"
    p = run(tmp_path, LAB_TEST="1", LAB_TEST_KEEP_GOING="1", LAB_TEST_ARGS="--no-leak-check -q",
            LAB_TEST_SUITE="tests/unit/netlab/test_topology.py -k no_such_test_name")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "provisioning goes on" in p.stderr
    failed = "the privileged subset failed: tests/unit/netlab/test_topology.py -k no_such_test_name"
    assert result.read_text().startswith(failed), result.read_text()
    p = run(tmp_path, LAB_TEST="1", LAB_TEST_KEEP_GOING="1", LAB_TEST_ARGS="--no-leak-check -q",
            LAB_TEST_SUITE="tests/unit/nodenet/test_podcidr.py -k node_pod_cidr")
    assert p.returncode == 0, p.stdout + p.stderr
    assert result.read_text() == "passed\n"


def test_all_runs_make_test_and_lab_test_0_runs_nothing(tmp_path):
    p = run(tmp_path, LAB_TEST="1", LAB_TEST_SUITE="all", MAKE="echo")
    assert p.returncode == 0 and "make test" in p.stdout, p.stdout + p.stderr
    assert f"-C {REPO} test PYTEST_ARGS=" in (tmp_path / "var/log/nodeagent/suite.log").read_text()
    p = run(tmp_path, LAB_TEST="0")
    assert p.returncode == 0 and "not running the test suite" in p.stdout
