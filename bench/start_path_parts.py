#!/usr/bin/env python3
"""Two parts of a pod's start in the runtime, measured apart (issue 26 item 3, sixth pass).

`hairpin`: N threads each make veth pairs on a private bridge (the host end enslaved, the peer in a
private netns, as the bridge plugin's ADD does) and turn hairpin on, through sysfs' brport/hairpin_mode
(its write retries rtnl_trylock, restarting the syscall while another thread holds rtnl_lock) or one
rtnetlink RTM_SETLINK (kernel.rtnl.set_hairpin, which sleeps on the lock): the process's CPU per veth.
`spawn`: a thread spawns /bin/true while another runs Python: how long the spawn call takes (until the
child has exec'd) and how much of it the other thread could run (its iterations then, against its rate
alone), with os.posix_spawn, subprocess.Popen and kernel.procs.spawn, which releases the GIL (and its
os.posix_spawn fallback for a libc without the ctypes path, which closes fds from 3 by close actions).
Run as root: PYTHONPATH=. python bench/start_path_parts.py [--veths 400] [--threads 8] [--spawns 300]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import add_plot_argument, plot_bars
from kernel import netlink, procs, rtnl, syscalls

BRIDGE = "nabenchhp0"


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def hairpin(veths: int, threads: int, how: str) -> tuple[float, float]:
    """(ms of this process's CPU per veth, wall seconds) making `veths` veths and setting hairpin."""
    ipr = netlink.host()
    netlink.ensure_bridge(ipr, BRIDGE, None, False, False)
    br = int(rtnl.sysfs_link(BRIDGE)["ifindex"])  # type: ignore[index]
    ns_fd: list[int] = []

    def new_netns() -> None:  # a netns for the peers, kept by an fd; this thread is not reused after
        syscalls.unshare(syscalls.CLONE_NEWNET)
        ns_fd.append(os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC))

    t = threading.Thread(target=new_netns)
    t.start()
    t.join()
    names = [f"nabhp{how[0]}{i:05d}" for i in range(veths)]

    def one(i: int) -> None:
        rtnl.request([rtnl.new_veth(names[i], f"eth{i}", ns_fd[0], br, rtnl.random_mac(), None, 1)])
        if how == "sysfs":
            with open(f"/sys/class/net/{names[i]}/brport/hairpin_mode", "w") as f:
                f.write("1")
        else:
            idx = int(rtnl.sysfs_link(names[i])["ifindex"])  # type: ignore[index]
            rtnl.request([rtnl.set_hairpin(idx, True, 1)])

    try:
        c0, w0 = _cpu(), time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, range(veths)))
        return (_cpu() - c0) / veths * 1e3, time.perf_counter() - w0
    finally:
        for n in names:
            rtnl.delete(n)
        rtnl.delete(BRIDGE)
        os.close(ns_fd[0])


def spawn_gil(n: int, how: str) -> tuple[float, float]:
    """(ms per spawn call, the share of it another Python thread could run) over `n` spawns of /bin/true:
    the call returns once the child has exec'd; a call that keeps the GIL stops every other thread."""
    stop = False
    count = 0

    def spin() -> None:
        nonlocal count
        while not stop:
            count += 1

    def call() -> int:
        if how == "os.posix_spawn":
            return os.posix_spawn("/bin/true", ["true"], os.environ, setsid=True)
        if how == "subprocess":
            p = subprocess.Popen(["/bin/true"], start_new_session=True)
            p.returncode = 0  # reaped below
            return p.pid
        return procs.spawn("/bin/true", ["true"], [], setsid=True, close_from=3)

    if how == "procs.spawn fallback":  # the os.posix_spawn path a libc without the ctypes path takes
        procs._ctypes_path()
        procs._use_ctypes = False
    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.2)
    c0, w0 = count, time.perf_counter()
    time.sleep(0.5)
    free_rate = (count - c0) / (time.perf_counter() - w0)  # the spinner alone (this thread asleep)
    inside = spun = 0.0
    try:
        for _ in range(n):
            c0, w0 = count, time.perf_counter()
            pid = call()
            inside += time.perf_counter() - w0
            spun += count - c0
            os.waitpid(pid, 0)
    finally:
        stop = True
        t.join()
        procs._use_ctypes = None
    return inside / n * 1e3, spun / inside / free_rate


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--veths", type=int, default=400)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--spawns", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    add_plot_argument(ap)
    a = ap.parse_args()
    groups: dict[str, dict[str, float]] = {"hairpin: ms CPU per veth": {},
                                           "spawn: % of the call another thread ran": {}}
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for r in range(a.rounds if a.veths else 0):
        for how in ("sysfs", "netlink"):
            cpu, wall = hairpin(a.veths, a.threads, how)
            groups["hairpin: ms CPU per veth"][how] = cpu  # the last round's
            print(f"round {r + 1} hairpin by {how:8s}: {cpu:6.3f} ms CPU per veth, {wall:5.2f} s for "
                  f"{a.veths} veths on {a.threads} threads")
    for r in range(a.rounds):
        for how in ("os.posix_spawn", "subprocess", "procs.spawn", "procs.spawn fallback"):
            per, share = spawn_gil(a.spawns, how)
            groups["spawn: % of the call another thread ran"][how] = 100 * share
            print(f"round {r + 1} spawn by {how:20s}: {per:5.3f} ms per call, another thread ran "
                  f"{share:4.0%} of it")
    if a.plot:
        plot_bars(a.plot, groups, "two parts of a pod's start (the last round)", "ms / %")
        print(f"plot: {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
