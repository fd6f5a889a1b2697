"""`nodeagent status`'s eviction table: the running node's thresholds read from its command line (the
kubelet's defaults otherwise), each signal observed on this host beside them."""

from __future__ import annotations

from nodeagent.commands.status_eviction import eviction_rows
from nodeagent.layout import Layout


def rows(tmp_path, argv):
    return {r[0]: r for r in eviction_rows(Layout.for_data_dir(tmp_path), argv)}


def test_defaults_are_the_kubelets(tmp_path):
    r = rows(tmp_path, [])
    assert r["memory.available"][3] == "<100Mi" and r["nodefs.available"][3] == "<10%"
    assert r["nodefs.inodesFree"][3] == "<5%" and r["imagefs.available"][3] == "<15%"
    assert r["pid.available"][3] == "-"
    assert all(row[4] in ("yes", "no") for row in r.values())


def test_the_running_nodes_flags_win_and_a_crossed_threshold_says_so(tmp_path):
    argv = ["nodeagent", "up", "--eviction-hard", "memory.available<99%,pid.available<10",
            "--eviction-soft=nodefs.available<20%", "--eviction-soft-grace-period", "nodefs.available=1m30s"]
    r = rows(tmp_path, argv)
    assert r["memory.available"][3] == "<99%" and r["memory.available"][4] == "yes"  # 1% of memory is in use
    assert r["pid.available"][3] == "<10" and r["pid.available"][4] == "no"
    assert r["nodefs.available"][3] == "<20% (soft, 90s)"
    assert r["imagefs.available"][3] == "-"  # not given: the defaults apply only when --eviction-hard is not


def test_a_flag_the_kubelet_would_refuse_is_shown_as_such(tmp_path):
    r = eviction_rows(Layout.for_data_dir(tmp_path), ["up", "--eviction-hard", "memory.available<lots"])
    assert r[0][0] == "(thresholds)" and r[0][3].startswith("invalid:")
