"""Run a Python module under tracemalloc; on each SIGUSR2 write where its memory is (issue 26 item 4).

RSS alone does not say what to cut. Each report (OUT.N.txt, N counting the signals) splits it into:
the process's anonymous and file-backed resident memory; glibc malloc's view (mallinfo2: bytes in use,
free bytes held in the arenas, mmapped blocks, and the arenas themselves from malloc_info); what Python
traced (tracemalloc's total, and the top files and lines that hold it: imported code, caches, buffers);
pymalloc's own arenas; and the live objects by type. The gap between RSS and the traced total is what
neither Python nor its allocator attributes: the interpreter and libraries' own text and data, C
extensions' allocations outside PyMem (OpenSSL, grpc), and free memory malloc keeps.

    python bench/memprofile.py [--no-trace] [--trim] OUT -m nodeagent up ...
        (kill -USR2 PID writes OUT.1.txt, OUT.2.txt, ...)

--no-trace: no tracemalloc (the process as it runs; the report has RSS, malloc's and pymalloc's figures);
--trim: after each report, malloc_trim(0) and the RSS after it (what free memory malloc gives back).
Traced, each report's snapshot is kept beside it (OUT.N.snap: `tracemalloc.Snapshot.load`, to compare two);
MEMPROFILE_FRAMES=N keeps N frames per block (default 1).

tracemalloc keeps a trace per block (one frame: ~60 bytes each), so the traced process is larger than an
untraced one: compare its reports with each other, and RSS with runs without it (bench/pod_startup.py).
"""

from __future__ import annotations

import collections
import ctypes
import ctypes.util
import gc
import io
import os
import re
import runpy
import signal
import sys
import tempfile
import tracemalloc
from pathlib import Path
from types import FrameType


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]


def _status() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        k, _, v = line.partition(":")
        if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "Threads"):
            out[k] = int(v.split()[0])
    return out


def _malloc() -> list[str]:
    """glibc's totals (mallinfo2) and its arenas (malloc_info's XML, one <heap> per arena)."""
    name = ctypes.util.find_library("c")
    if not name:
        return ["malloc: no C library found"]
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallinfo2"):
        return ["malloc: not glibc (no mallinfo2)"]
    libc.mallinfo2.restype = _Mallinfo2
    mi = libc.mallinfo2()
    lines = [f"malloc in use {mi.uordblks / 2**20:.1f} MiB, free in arenas {mi.fordblks / 2**20:.1f} MiB, "
             f"arena bytes (sbrk+heaps) {mi.arena / 2**20:.1f} MiB, mmapped blocks {mi.hblks} = "
             f"{mi.hblkhd / 2**20:.1f} MiB, top releasable {mi.keepcost / 2**20:.2f} MiB"]
    with tempfile.TemporaryFile() as tmp:
        libc.fdopen.restype = ctypes.c_void_p
        libc.fdopen.argtypes = (ctypes.c_int, ctypes.c_char_p)
        fp = libc.fdopen(os.dup(tmp.fileno()), b"w")
        libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
        libc.malloc_info(0, fp)
        libc.fclose.argtypes = (ctypes.c_void_p,)
        libc.fclose(fp)
        tmp.seek(0)
        xml = tmp.read().decode(errors="replace")
    heaps = re.findall(r'<heap nr="(\d+)">.*?<system type="current" size="(\d+)"/>', xml, re.S)
    each = ", ".join(f"#{n} {int(s) / 2**20:.1f} MiB" for n, s in heaps)
    lines.append(f"malloc arenas: {len(heaps)}: {each}")
    return lines


def _pymalloc() -> list[str]:
    """The summary lines of sys._debugmallocstats (pymalloc's arenas, pools and free blocks)."""
    saved = os.dup(2)
    sys.stderr.flush()
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    keep = ("arenas allocated total", "arenas reclaimed", "arenas highwater", "# arenas allocated current",
            "bytes in allocated blocks", "bytes in available blocks", "unused pools", "Total")
    return ["pymalloc: " + " ".join(line.split()) for line in text.splitlines()
            if any(k in line for k in keep)]


def _modules() -> list[tuple[str, tuple[int, int]]]:
    """Top-level package -> (modules imported, their source's size on disk): where imported code goes (its
    code objects, docstrings and module dicts in memory are a few times the source's size)."""
    by: dict[str, list[int]] = {}
    for name, mod in list(sys.modules.items()):
        spec = getattr(mod, "__spec__", None)
        origin = getattr(spec, "origin", None) if spec is not None else None
        try:
            size = os.path.getsize(origin) if origin and origin.endswith(".py") else 0
        except OSError:
            size = 0
        slot = by.setdefault(name.split(".")[0], [0, 0])
        slot[0] += 1
        slot[1] += size
    return sorted(((k, (v[0], v[1])) for k, v in by.items()), key=lambda kv: -kv[1][1])


def report(top: int = 40, trim: bool = False, snapshot: str = "") -> str:
    out = io.StringIO()
    st = _status()
    print(f"RSS {st['VmRSS'] / 1024:.1f} MiB (anon {st['RssAnon'] / 1024:.1f}, "
          f"file {st['RssFile'] / 1024:.1f}, shmem {st['RssShmem'] / 1024:.1f}), threads {st['Threads']}",
          file=out)
    for line in _malloc() + _pymalloc():  # pymalloc says nothing while tracemalloc hooks the allocators
        print(line, file=out)
    if trim:
        name = ctypes.util.find_library("c")
        if name and hasattr(ctypes.CDLL(name), "malloc_trim"):
            ctypes.CDLL(name).malloc_trim(0)
            print(f"after malloc_trim(0): RSS {_status()['VmRSS'] / 1024:.1f} MiB", file=out)
    print(f"\n-- imported modules by top package: source size, count; top {top // 2} --", file=out)
    for name, (n, size) in _modules()[:top // 2]:
        print(f"{size / 2**20:8.2f} MiB {n:5d}  {name}", file=out)
    if not tracemalloc.is_tracing():
        return out.getvalue()
    snap = tracemalloc.take_snapshot()
    if snapshot:
        snap.dump(snapshot)  # tracemalloc.Snapshot.load(...).compare_to(...) between two reports
    traced, peak = tracemalloc.get_traced_memory()
    print(f"tracemalloc: traced {traced / 2**20:.1f} MiB (peak {peak / 2**20:.1f}), its own overhead "
          f"{tracemalloc.get_tracemalloc_memory() / 2**20:.1f} MiB, modules {len(sys.modules)}", file=out)
    by_pkg: collections.Counter[str] = collections.Counter()
    for s in snap.statistics("filename"):
        f = s.traceback[0].filename
        m = (re.search(r"site-packages/([^/]+)", f)
             or re.search(r"/(nodeagent|cri|cni|csi|netproxy|netpol|kernel)/([^/]+)", f)
             or re.search(r"lib/python3[^/]*/([^/]+)", f))
        key = "/".join(g for g in m.groups() if g) if m else f
        by_pkg[key] += s.size
    print(f"\n-- traced by package/directory (top {top}) --", file=out)
    for k, v in by_pkg.most_common(top):
        print(f"{v / 2**20:8.2f} MiB  {k}", file=out)
    print(f"\n-- traced by line (top {top}) --", file=out)
    for s in snap.statistics("lineno")[:top]:
        fr = s.traceback[0]
        print(f"{s.size / 2**20:8.2f} MiB {s.count:8d}  {fr.filename}:{fr.lineno}", file=out)
    types: collections.Counter[str] = collections.Counter(type(o).__name__ for o in gc.get_objects())
    print(f"\n-- gc-tracked objects by type (top {top // 2}) --", file=out)
    for k, n in types.most_common(top // 2):
        print(f"{n:9d}  {k}", file=out)
    return out.getvalue()


def main() -> None:
    args = sys.argv[1:]
    trace = "--no-trace" not in args
    trim = "--trim" in args
    frames = int(os.environ.get("MEMPROFILE_FRAMES", "1"))
    args = [a for a in args if a not in ("--no-trace", "--trim")]
    if len(args) < 3 or args[1] != "-m":
        print(__doc__)
        raise SystemExit(0 if args in (["-h"], ["--help"]) else 2)
    out, _, module, *rest = args
    if trace:
        tracemalloc.start(frames)
    n = [0]

    def dump(signum: int, frame: FrameType | None) -> None:
        n[0] += 1
        path = f"{out}.{n[0]}.txt"
        Path(path + ".tmp").write_text(report(trim=trim, snapshot=f"{out}.{n[0]}.snap" if trace else ""))
        os.replace(path + ".tmp", path)  # whole, for the reader waiting on the name

    signal.signal(signal.SIGUSR2, dump)
    sys.argv = [module, *rest]
    sys.path[0] = os.getcwd()  # as `python -m` would (bench/netpol.py would shadow the netpol package)
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
