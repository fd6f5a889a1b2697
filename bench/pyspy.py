"""Sample a running process with py-spy (from PyPI, in the test extras) and print where its time went.

Used by the benchmarks' `--py-spy` flag around their measured phase: py-spy records collapsed stacks
(`--format raw`, one line per distinct stack with its sample count) without stopping the process, so
the figures of the run stay comparable; the summary is the top functions by own samples and by
samples anywhere on the stack.
"""

from __future__ import annotations

import collections
import contextlib
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _py_spy() -> str:
    here = Path(sys.executable).with_name("py-spy")
    found = str(here) if here.exists() else shutil.which("py-spy")
    if not found:
        raise SystemExit("--py-spy needs py-spy: make install (it is in the test extras)")
    return found


def stacks(raw: str) -> Iterator[tuple[list[str], int]]:
    """(frames outermost first, samples) of each line of collapsed stacks."""
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            yield stack.split(";"), int(count)


def summarise(raw: str, top: int = 15) -> str:
    """The top functions of collapsed stacks by own ("self") and inclusive samples, as text."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for stack, n in stacks(raw):
        total += n
        frames = [f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].rsplit("/", 2)[-1] + ")"
                  if " (" in f else f for f in stack]
        if frames:
            own[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    if not total:
        return "py-spy: no samples"
    out = [f"py-spy: {total} samples; top by own time:"]
    out += [f"  {100 * n / total:5.1f}%  {f}" for f, n in own.most_common(top)]
    out.append("top by inclusive time (anywhere on the stack; the event loop's own frames left out):")
    out += [f"  {100 * n / total:5.1f}%  {f}" for f, n in
            [(f, n) for f, n in incl.most_common() if n < 0.9 * total][:top]]
    return "\n".join(out)


# Where a stack's samples are charged: the outermost frame of this tree names the component (the task's
# coroutine, or the function a worker thread runs), so a kubelet call into the in-process CRI server
# counts for the kubelet and the server's own handler tasks for the runtime.
_COMPONENTS = (("nodeagent/apiserver/", "apiserver"), ("nodeagent/store/", "store"),
               ("nodeagent/scheduler/", "scheduler"), ("nodeagent/controllers/", "controllers"),
               ("nodeagent/kubelet/", "kubelet"), ("nodeagent/client/", "client (informers)"),
               ("nodeagent/dns/", "dns"), ("nodeagent/netproxy/", "netproxy"),
               ("nodeagent/netpol/", "netpol"),
               ("nodeagent/nodenet/", "nodenet"), ("cri/", "runtime (CRI)"), ("cni/", "cni"),
               ("kernel/", "kernel"), ("nodeagent/", "nodeagent (other)"))


_DISPATCH = ("Handle._run (asyncio/events.py", "_WorkItem.run (concurrent/futures/thread.py",
             "Thread.run (threading.py")


def _component(frames: list[str]) -> str:
    """The component of the outermost frame of this tree below the loop's or the thread's dispatch."""
    start = max((i + 1 for i, f in enumerate(frames) if f.startswith(_DISPATCH)), default=0)
    for f in frames[start:]:
        path = f.rpartition(" (")[2]
        for prefix, name in _COMPONENTS:
            if path.startswith(prefix) or "/" + prefix in path and "-packages/" not in path:
                return name
    return "threads (other)" if frames and "threading.py" in frames[0] else "event loop (other)"


def by_component(raw: str) -> dict[str, float]:
    """Share of samples per component (the outermost frame of this tree on each stack)."""
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for stack, n in stacks(raw):
        counts[_component(stack)] += n
        total += n
    return {k: n / total for k, n in counts.most_common()} if total else {}


@contextlib.contextmanager
def recording(pid: int, rate: int = 250, top: int = 15) -> Iterator[None]:
    """py-spy samples `pid` for the duration of the block; the summary is printed at its end."""
    with tempfile.TemporaryDirectory(prefix="pyspy-") as d:
        out = Path(d) / "stacks.txt"
        proc = subprocess.Popen([_py_spy(), "record", "--pid", str(pid), "--rate", str(rate), "--format",
                                 "raw", "--nonblocking", "--output", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            yield
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            if out.exists():
                kept = Path(tempfile.gettempdir()) / f"pyspy-{pid}.txt"
                shutil.copyfile(out, kept)
                print(summarise(out.read_text(), top) + f"\n(collapsed stacks: {kept})", flush=True)
            else:
                print(f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}", flush=True)
