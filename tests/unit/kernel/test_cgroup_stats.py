"""The cgroup drivers' counters, read from files laid out as the kernel lays them out (v1 and v2)."""

from __future__ import annotations

import os
from pathlib import Path

from kernel.cgroups.v1 import V1Cgroups
from kernel.cgroups.v2 import V2Cgroups

TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def files(d: Path, contents: dict[str, str]) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in contents.items():
        (d / name).write_text(text)


def test_v2_detail_reads_user_system_throttling_cache_and_io(tmp_path):
    files(tmp_path / "pod/c", {
        "cpu.stat": "usage_usec 5000\nuser_usec 3000\nsystem_usec 2000\nnr_periods 10\nnr_throttled 4\n"
                    "throttled_usec 700\n",
        "memory.current": "1000000\n", "memory.max": "max\n",
        "memory.stat": "anon 400000\nfile 300000\ninactive_file 100000\npgfault 50\npgmajfault 5\n",
        "pids.current": "3\n",
        "io.stat": "8:0 rbytes=100 wbytes=200 rios=1 wios=2\n8:16 rbytes=1 wbytes=2\n"})
    d = V2Cgroups(str(tmp_path))
    plain = d.stats("/pod/c")
    assert (plain.cpu_usage_ns, plain.memory_working_set, plain.cpu_user_ns) == (5_000_000, 900_000, 0)
    st = d.stats("/pod/c", detail=True)
    assert (st.cpu_user_ns, st.cpu_system_ns) == (3_000_000, 2_000_000)
    assert (st.cfs_periods, st.cfs_throttled_periods, st.cfs_throttled_ns) == (10, 4, 700_000)
    assert (st.memory_cache, st.io_read_bytes, st.io_write_bytes) == (300_000, 101, 202)
    assert st.memory_working_set == plain.memory_working_set and st.pids == 3


def test_v1_detail_reads_cpuacct_stat_in_ticks_and_cfs_counters(tmp_path):
    cpu, mem = tmp_path / "cpu,cpuacct", tmp_path / "memory"
    files(cpu / "pod/c", {"cpuacct.usage": "9000\n", "cpuacct.stat": "user 3\nsystem 2\n",
                          "cpu.stat": "nr_periods 7\nnr_throttled 1\nthrottled_time 123\n"})
    files(mem / "pod/c", {"memory.usage_in_bytes": "2000\n", "memory.limit_in_bytes": "4096\n",
                          "memory.stat": "total_cache 700\ntotal_rss 900\ntotal_inactive_file 500\n"})
    d = V1Cgroups({"cpu": str(cpu), "cpuacct": str(cpu), "memory": str(mem)})
    st = d.stats("/pod/c", detail=True)
    assert (st.cpu_usage_ns, st.cpu_user_ns, st.cpu_system_ns) == (9000, 3 * TICK_NS, 2 * TICK_NS)
    assert (st.cfs_periods, st.cfs_throttled_periods, st.cfs_throttled_ns) == (7, 1, 123)
    assert (st.memory_working_set, st.memory_cache, st.memory_limit) == (1500, 700, 4096)
    assert d.stats("/pod/c").cfs_periods == 0  # without detail, only what the CRI stats need
