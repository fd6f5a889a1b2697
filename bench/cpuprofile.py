"""Run a Python module under cProfile timed by the thread's CPU clock, switched on and off by SIGUSR2.

py-spy samples wall time: on this shared, loaded host a process waiting for a core is sampled in
whatever frame it was preempted in (a socket send's return, mostly), so its shares are not CPU shares.
This launcher times every call with CLOCK_THREAD_CPUTIME_ID instead (the event loop's thread, where the
apiserver and the embedded scheduler run), so the split it gives is of CPU spent. Each Python call pays
for two clock reads (C functions are not timed apart: their time is their caller's), so code making many
small Python calls is overstated; compare shares, not absolute figures.

    python bench/cpuprofile.py OUT.pstats -m nodeagent server ...   (kill -USR2 to start, again to stop)

`bench/scheduler.py --cpu-profile` starts the server this way and prints the split of its measured phase.
"""

from __future__ import annotations

import collections
import cProfile
import os
import pstats
import runpy
import signal
import sys
import time
from types import FrameType


def main() -> None:
    if len(sys.argv) < 4 or sys.argv[2] != "-m":
        print(__doc__)
        raise SystemExit(0 if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help") else 2)
    out, _, module, *rest = sys.argv[1:]
    # builtins off: a C call's time is its caller's own time (timing each dict.get and list.append
    # with two clock reads overstated code that makes many of them several times over)
    prof = cProfile.Profile(time.thread_time_ns, 1e-9, builtins=False)
    on = [False]

    def toggle(signum: int, frame: FrameType | None) -> None:
        if not on[0]:
            prof.enable()
        else:
            prof.disable()
            prof.dump_stats(out + ".tmp")
            os.replace(out + ".tmp", out)  # whole, for the reader waiting on the name
        on[0] = not on[0]
    signal.signal(signal.SIGUSR2, toggle)
    sys.argv = [module, *rest]
    # as `python -m` would: the working directory first, not this script's (bench/netpol.py would shadow
    # the netpol package)
    sys.path[0] = os.getcwd()
    runpy.run_module(module, run_name="__main__", alter_sys=True)


# which component a function belongs to, by where its code lives (first match wins)
COMPONENTS = [
    ("scheduler: filter/score plugins", ("nodeagent/scheduler/plugins/", "scheduler/framework/runtime.py")),
    ("scheduler: cycle, queue, cache", ("nodeagent/scheduler/",)),
    ("client: informers, requests, events", ("nodeagent/client/",)),
    ("apiserver: watch cache and watch handler", ("apiserver/cache.py", "apiserver/watch.py")),
    ("apiserver: registry (admission, validation, store)", ("apiserver/registry.py", "apiserver/admission.py",
                                                             "nodeagent/api/", "nodeagent/store/")),
    ("apiserver: authn/authz, metrics, in-flight", ("apiserver/auth", "apiserver/metrics.py",
                                                    "apiserver/inflight.py", "prometheus_client")),
    ("apiserver: handlers, codec", ("nodeagent/apiserver/",)),
    ("aiohttp (HTTP server and client)", ("aiohttp/", "multidict", "yarl")),
    ("TLS and sockets (ssl, asyncio transports)", ("ssl.py", "sslproto.py", "selector_events.py")),
    ("event loop", ("asyncio/",)),
]


def split(path: str, top: int = 25) -> str:
    """CPU by component (own time of each function, attributed by its file) and the top functions."""
    st = pstats.Stats(path)
    total = 0.0
    by: collections.Counter[str] = collections.Counter()
    rows = []
    for (file, line, name), (_cc, _nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        total += tt
        where = f"{file}:{name}"
        comp = next((c for c, keys in COMPONENTS if any(k in where for k in keys)), "other")
        by[comp] += tt
        rows.append((tt, ct, f"{file.rsplit('/', 2)[-1] if '/' in file else file}:{line}({name})"))
    if not total:
        return "cpu profile: nothing recorded"
    out = [f"cpu profile of the server's event-loop thread: {total:.2f} s CPU in Python-visible calls; "
           "by component (own time):"]
    out += [f"  {100 * t / total:5.1f}%  {c}" for c, t in by.most_common()]
    out.append("top functions by own CPU time (own %, inclusive %):")
    out += [f"  {100 * tt / total:5.1f}%  {100 * ct / total:5.1f}%  {f}"
            for tt, ct, f in sorted(rows, reverse=True)[:top]]
    return "\n".join(out)


if __name__ == "__main__":
    main()
