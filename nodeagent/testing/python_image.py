"""A Python program in a locally built image, with no registry and no network: the interpreter that runs
nodeagent (its real binary, every shared library `ldd` resolves for it and for its extension modules, its
standard library without tests, tk, idle or caches, all at their host paths, so the interpreter finds its own
prefix) plus chosen distributions from its environment and their requirements, copied into the base
prefix's site-packages. Used for webhook servers in tests and for the example operator; a Debian python3 in a
debootstrapped rootfs would do the same at minutes per build.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from packaging.requirements import Requirement

from nodeagent.testing.images import Entry, ImageSpec

_SKIP_DIRS = {"test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "__pycache__",
              "site-packages", "dist-packages", "pydoc_data"}


def interpreter() -> Path:
    """The real binary behind sys.executable (a venv's python is a symlink to it)."""
    return Path(os.path.realpath(sys.executable))


def stdlib_dir() -> Path:
    return Path(sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})["stdlib"])


def _libraries(binaries: list[Path]) -> set[Path]:
    """Every shared library the dynamic loader resolves for `binaries` (and the loader itself)."""
    out: set[Path] = set()
    for b in binaries:
        p = subprocess.run(["ldd", str(b)], capture_output=True, text=True, check=False)
        for line in p.stdout.splitlines():
            words = line.split()
            path = words[2] if "=>" in words and len(words) > 2 else words[0] if words else ""
            if path.startswith("/"):
                out.add(Path(path))
    return out


def distribution_closure(names: tuple[str, ...]) -> list[md.Distribution]:
    """The named distributions and everything they require (markers evaluated, no extras)."""
    seen: dict[str, md.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue  # an optional requirement this environment does not have
        seen[key] = dist
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _file_entries(files: dict[str, Path]) -> list[Entry]:
    """Entries for image path -> host file, with every parent directory before its children."""
    dirs = {"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)} - {""}
    entries = [Entry(d, kind="dir", mode=0o755) for d in sorted(dirs)]
    for dest, src in sorted(files.items()):
        mode = 0o755 if os.access(src, os.X_OK) else 0o644
        entries.append(Entry(dest, data=src.read_bytes(), mode=mode))
    return entries


def python_layer(distributions: tuple[str, ...] = ()) -> tuple[Entry, ...]:
    """The interpreter, its libraries and standard library, and `distributions` with their requirements,
    as one layer; `python3` on PATH (/usr/local/bin)."""
    exe = interpreter()
    stdlib = stdlib_dir()
    files: dict[str, Path] = {str(exe).lstrip("/"): exe}
    extensions: list[Path] = []
    for root, dirs, names in os.walk(stdlib):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith("config-")]
        for n in names:
            p = Path(root) / n
            if n.endswith((".pyc", ".exe")) or not p.is_file():
                continue
            files[str(p).lstrip("/")] = p
            if n.endswith(".so"):
                extensions.append(p)
    site = stdlib / "site-packages"
    for dist in distribution_closure(distributions):
        for f in dist.files or ():
            src = Path(str(dist.locate_file(f))).resolve()
            if "__pycache__" in f.parts or f.parts[0] == ".." or not src.is_file():
                continue
            files[str(site / f).lstrip("/")] = src
            if f.suffix == ".so":
                extensions.append(src)
    for lib in _libraries([exe, *extensions]):
        real = lib.resolve()
        files[str(lib).lstrip("/")] = real
    entries = _file_entries(files)
    entries += [Entry("usr/local", kind="dir", mode=0o755), Entry("usr/local/bin", kind="dir", mode=0o755),
                Entry("usr/local/bin/python3", kind="symlink", target=str(exe))]
    return tuple(entries)


def python_spec(name: str, tag: str, distributions: tuple[str, ...] = (),
                app: tuple[Entry, ...] = (), cmd: tuple[str, ...] | None = None) -> ImageSpec:
    """busybox, the Python layer, then the application's files (`app`)."""
    layers: tuple[tuple[Entry, ...], ...] = (python_layer(distributions),)
    if app:
        layers += (app,)
    return ImageSpec(name, tag, cmd=cmd, extra_layers=layers,
                     env=("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                          "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"))
