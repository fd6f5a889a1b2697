"""`nodeagent image build -t NAME:TAG [-f FILE] DIR`: an image from a Containerfile, into the runtime's
store, with no registry.

The Containerfile is checked against the subset we support first (FROM scratch or an image of our store,
COPY, ADD of local files, RUN, ENV, WORKDIR, USER, ENTRYPOINT, CMD, EXPOSE, LABEL): anything else is
refused naming the instruction and its line, before anything is built. The build itself is Debian's
podman (buildah) with a private, throwaway storage and chroot isolation, so RUN runs the base image's
programs on this kernel; a FROM image of our store is handed to it as a docker-archive of its layers
(overlay whiteouts turned back into `.wh.` entries), and the result is imported into our store.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import stat
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cri.images import ImageStore
    from cri.images.store import Image

SUPPORTED = ("FROM", "COPY", "ADD", "RUN", "ENV", "WORKDIR", "USER", "ENTRYPOINT", "CMD", "EXPOSE", "LABEL")
OPAQUE_XATTR = "trusted.overlay.opaque"  # how our store's unpacked layers mark an opaque directory


class BuildError(Exception):
    """A Containerfile we refuse, or a build that failed; the message says which line and why."""


@dataclasses.dataclass(frozen=True)
class Instruction:
    line: int  # where it starts in the file, 1-based
    keyword: str  # upper case
    args: str


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-t", "--tag", required=True, metavar="NAME:TAG",
                   help="the image's name, e.g. localhost/web:v1")
    p.add_argument("-f", "--file", default=None, metavar="FILE",
                   help="the Containerfile (default: DIR/Containerfile, else DIR/Dockerfile)")
    p.add_argument("context", metavar="DIR", help="the build context COPY and ADD read from")


def parse(text: str, origin: str) -> list[Instruction]:
    """The instructions, continuation lines joined; an unsupported one (or a remote ADD, COPY --from) is
    refused with its line."""
    out: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if not pending:
            start = n
        if line.endswith("\\"):
            pending.append(line[:-1])
            continue
        pending.append(line)
        joined = " ".join(p.strip() for p in pending).strip()
        pending = []
        keyword, _, args = joined.partition(" ")
        out.append(_check(Instruction(start, keyword.upper(), args.strip()), origin))
    if pending:
        raise BuildError(f"{origin}:{start}: the file ends inside a continued line")
    if not out or out[0].keyword != "FROM":
        raise BuildError(f"{origin}:{out[0].line if out else 1}: the first instruction must be FROM")
    if sum(i.keyword == "FROM" for i in out) > 1:
        second = [i for i in out if i.keyword == "FROM"][1].line
        raise BuildError(f"{origin}:{second}: multi-stage builds (a second FROM) are not supported")
    return out


def _check(i: Instruction, origin: str) -> Instruction:
    where = f"{origin}:{i.line}"
    if i.keyword not in SUPPORTED:
        raise BuildError(f"{where}: {i.keyword} is not supported (supported: {', '.join(SUPPORTED)})")
    if not i.args:
        raise BuildError(f"{where}: {i.keyword} needs arguments")
    if i.keyword in ("COPY", "ADD"):
        for flag in re.findall(r"(?:^|\s)(--[a-z-]+)", i.args.split(" ", 1)[0] if i.args.startswith("--")
                                else ""):
            if flag != "--chown":
                raise BuildError(f"{where}: {i.keyword} {flag} is not supported (only --chown)")
        if i.keyword == "ADD" and re.search(r"(?:^|\s)(https?|git)://", i.args):
            raise BuildError(f"{where}: ADD from a URL is not supported (no network: put the file in the "
                             "context)")
    if i.keyword == "FROM" and (" AS " in f" {i.args.upper()} " or "--" in i.args):
        raise BuildError(f"{where}: FROM takes one image (scratch or one in the store), no stage name or "
                         "flags")
    return i


def export_archive(store: ImageStore, image: Image, dest: Path) -> Path:
    """A docker-archive of an image of our store, its layers tarred from the unpacked dirs (a 0/0
    character device back to `.wh.NAME`, an opaque dir to `.wh..wh..opq`), the config's diff_ids those
    tars'."""
    config = json.loads(store.blobs.read(image.id))
    layer_names = []
    diff_ids = []
    with tarfile.open(dest, "w") as out:
        for n, layer in enumerate(image.layers):
            raw = _tar_layer(layer)
            digest = "sha256:" + hashlib.sha256(raw).hexdigest()
            diff_ids.append(digest)
            name = f"layer{n}.tar"
            _add(out, name, raw)
            layer_names.append(name)
        config.setdefault("rootfs", {})["diff_ids"] = diff_ids
        config_bytes = json.dumps(config).encode()
        _add(out, "config.json", config_bytes)
        _add(out, "manifest.json", json.dumps([{"Config": "config.json", "RepoTags": [],
                                                "Layers": layer_names}]).encode())
    return dest


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _tar_layer(root: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, root)
            if rel_dir != ".":
                try:
                    opaque = os.getxattr(dirpath, OPAQUE_XATTR, follow_symlinks=False) == b"y"
                except OSError:
                    opaque = False
                if opaque:
                    tar.addfile(tarfile.TarInfo(f"{rel_dir}/.wh..wh..opq"), io.BytesIO(b""))
            for name in sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                path = os.path.join(dirpath, name)
                rel = os.path.normpath(os.path.join(rel_dir, name))
                st = os.lstat(path)
                if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                    parent, base = os.path.split(rel)
                    tar.addfile(tarfile.TarInfo(os.path.join(parent, f".wh.{base}")), io.BytesIO(b""))
                    continue
                info = tar.gettarinfo(path, rel)
                if info.isreg():
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
                else:
                    tar.addfile(info)
            for d in dirnames:
                path = os.path.join(dirpath, d)
                if not os.path.islink(path):
                    tar.addfile(tar.gettarinfo(path, os.path.normpath(os.path.join(rel_dir, d))))
    return buf.getvalue()


def build(store: ImageStore, tag: str, containerfile: Path, context: Path) -> list[str]:
    """Build `containerfile` in `context` as `tag` and import it; the imported names and ids."""
    from cri.images.reference import parse as parse_ref

    try:
        parse_ref(tag)
    except Exception as e:
        raise BuildError(f"-t {tag}: {e}") from None
    text = containerfile.read_text()
    instructions = parse(text, str(containerfile))
    podman = shutil.which("podman")
    if podman is None:
        raise BuildError("podman is needed for RUN and the layer assembly (make install adds it)")
    # podman refuses a runroot path longer than 50 characters: that one is short, under /tmp
    with tempfile.TemporaryDirectory(dir=store.tmp_dir, prefix="build-") as tmp, \
            tempfile.TemporaryDirectory(prefix="nodeagent-build-") as runroot:
        work = Path(tmp)
        base = instructions[0].args.strip()
        lines = text.splitlines()
        if base != "scratch":
            image = store.resolve(base)
            if image is None:
                raise BuildError(f"{containerfile}:{instructions[0].line}: FROM {base}: not in the image "
                                 "store (nodeagent image import / pull / demo it first)")
            archive = export_archive(store, image, work / "base.tar")
            lines[instructions[0].line - 1] = f"FROM docker-archive:{archive}"
        rewritten = work / "Containerfile"
        rewritten.write_text("\n".join(lines) + "\n")
        podman_argv = [podman, "--root", str(work / "root"), "--runroot", runroot,
                       "--storage-driver", "vfs", "--cgroup-manager", "cgroupfs"]
        env = _private_network_config(work)
        p = subprocess.run([*podman_argv, "build", "--quiet", "--isolation", "chroot", "--pull=never",
                            "-f", str(rewritten), "-t", tag, str(context)],
                           capture_output=True, text=True, check=False, env=env)
        if p.returncode != 0:
            raise BuildError(f"build failed: {p.stderr.strip() or p.stdout.strip()}")
        out = work / "image.tar"
        p = subprocess.run([*podman_argv, "save", "--format", "docker-archive", "-o", str(out), tag],
                           capture_output=True, text=True, check=False, env=env)
        if p.returncode != 0:
            raise BuildError(f"saving the built image failed: {p.stderr.strip()}")
        imported = store.import_archive(out)
        return [f"{', '.join(img.repo_tags)} {img.id}" for img in imported]


def _private_network_config(work: Path) -> dict[str, str]:
    """podman's environment with a containers.conf of its own whose network config dir is under `work`:
    podman 4.3's CNI backend makes `cni.lock` in its config dir (/etc/cni/net.d by default) on every start
    and never removes it, and a chroot-isolated build uses the host's network anyway, so nothing of the
    host's CNI config is needed (CONTAINERS_CONF: this file instead of the system's; the rest at
    podman's defaults)."""
    conf = work / "containers.conf"
    conf.write_text(f'[network]\nnetwork_config_dir = "{work / "net.d"}"\n')
    (work / "net.d").mkdir(exist_ok=True)
    return {**os.environ, "CONTAINERS_CONF": str(conf)}


def run_build(store: ImageStore, args: argparse.Namespace) -> int:
    import sys

    context = Path(args.context)
    if not context.is_dir():
        print(f"error: build context {context}: not a directory", file=sys.stderr)
        return 2
    if args.file:
        containerfile = Path(args.file)
    else:
        containerfile = next((context / n for n in ("Containerfile", "Dockerfile") if (context / n).exists()),
                             context / "Containerfile")
    try:
        for line in build(store, args.tag, containerfile, context):
            print(f"built {line}")
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
