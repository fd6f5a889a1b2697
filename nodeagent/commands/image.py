"""`nodeagent image import|pull|ls|rm`: the runtime's image store, from the command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from nodeagent.layout import REGISTRIES, Layout

if TYPE_CHECKING:
    from cri.images import ImageStore
    from cri.images.progress import ProgressEvent

DEFAULT_STATE_DIR = Layout.default().image_dir
DEFAULT_REGISTRIES = REGISTRIES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-dir", default=DEFAULT_STATE_DIR,
                   help=f"image store root (default: {DEFAULT_STATE_DIR})")
    sub = p.add_subparsers(dest="image_command", metavar="SUBCOMMAND", required=True)
    imp = sub.add_parser("import", help="import an OCI image layout (dir or tar) or a docker-archive tarball")
    imp.add_argument("file", metavar="FILE",
                     help="archive path, or - for a tarball on stdin (docker save | ...)")
    imp.add_argument("--no-progress", action="store_true", help="no progress bar")
    pull = sub.add_parser("pull",
                          help="pull an image from its registry (or the mirrors registries.yaml names)")
    pull.add_argument("ref", metavar="REF")
    pull.add_argument("--registries", default=None, metavar="FILE",
                      help=f"k3s-style registries.yaml (default: {DEFAULT_REGISTRIES} if present)")
    pull.add_argument("--creds", default=None, metavar="USER[:PASSWORD]", help="registry credentials")
    pull.add_argument("--no-progress", action="store_true", help="no progress bar")
    ls = sub.add_parser("ls", help="list images")
    ls.add_argument("-q", "--quiet", action="store_true", help="image ids only")
    ls.add_argument("-o", "--output", choices=["table", "json"], default="table", help="output format")
    rm = sub.add_parser("rm", help="remove an image (a tag, or by id/digest the whole image)")
    rm.add_argument("refs", nargs="+", metavar="REF")
    inspect = sub.add_parser("inspect", help="print an image's record, config and layer directories as JSON")
    inspect.add_argument("ref", metavar="REF")
    demo = sub.add_parser("demo", help="build and import the walkthrough's images with no network: "
                                       "localhost/busybox:latest and localhost/httpd:v1 (from Debian's "
                                       "busybox-static)")
    from nodeagent.commands import image_build

    bld = sub.add_parser("build", help="build an image from a Containerfile (FROM scratch or a stored image, "
                                      "COPY, ADD, RUN, ENV, WORKDIR, USER, ENTRYPOINT, CMD, EXPOSE, LABEL)")
    image_build.add_arguments(bld)
    for sp in (imp, pull, ls, rm, inspect, demo, bld):  # accepted after the subcommand too
        sp.add_argument("--state-dir", default=argparse.SUPPRESS, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    from cri.images import ImageStore, RegistriesConfig
    from cri.images.errors import ImageError

    registries = None
    if getattr(args, "registries", None) is not None or args.image_command == "pull":
        registries = RegistriesConfig.load(getattr(args, "registries", None))
    store = ImageStore(Path(args.state_dir), registries)
    try:
        return _COMMANDS[args.image_command](store, args)
    except ImageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


class _Bar:
    """A tqdm bar fed by store progress events (bytes of layers read or downloaded)."""

    def __init__(self, enabled: bool, desc: str) -> None:
        self.bar = None
        self.enabled = enabled
        self.desc = desc
        self.per_blob: dict[str, int] = {}

    def __call__(self, ev: ProgressEvent) -> None:
        from cri.images import progress as pg

        if not self.enabled:
            return
        if self.bar is None and ev.total:
            from tqdm import tqdm

            self.bar = tqdm(total=ev.total, desc=self.desc, unit="B", unit_scale=True, unit_divisor=1024,
                            file=sys.stderr, leave=True)
        if self.bar is None:
            return
        pos = self.bar.n
        if ev.phase in (pg.UNPACK, pg.LAYER_DONE) and ev.total == self.bar.total:
            pos = ev.current  # import: position across all layers
        elif ev.phase in (pg.DOWNLOAD, pg.EXISTS, pg.LAYER_DONE):
            self.per_blob[ev.digest] = ev.current
            pos = min(sum(self.per_blob.values()), self.bar.total)
        elif ev.phase == pg.DONE:
            pos = self.bar.total
        if pos > self.bar.n:
            self.bar.update(pos - self.bar.n)  # tqdm throttles the redraws

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _cmd_import(store: ImageStore, args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    spool = None
    path = Path(args.file)
    if args.file == "-":  # a tar needs random access: spool stdin beside the store first
        spool = tempfile.NamedTemporaryFile(dir=store.tmp_dir, prefix="stdin-", suffix=".tar")
        shutil.copyfileobj(sys.stdin.buffer, spool, 1 << 20)
        spool.flush()
        path = Path(spool.name)
    bar = _Bar(not args.no_progress, f"import {'stdin' if spool else path.name}")
    try:
        imported = store.import_archive(path, progress=bar)
    finally:
        bar.close()
        if spool:
            spool.close()
    for img in imported:
        print(f"imported {', '.join(img.repo_tags) or '<untagged>'} {img.id}")
    return 0


def _cmd_build(store: ImageStore, args: argparse.Namespace) -> int:
    from nodeagent.commands.image_build import run_build

    return run_build(store, args)


def _cmd_demo(store: ImageStore, args: argparse.Namespace) -> int:
    """The README walkthrough's images, built from this host's busybox-static (deterministic: the same
    busybox gives the same digests), so the first pod needs no registry."""
    import tempfile

    from nodeagent.testing.images import BUSYBOX, HTTPD, build, find_busybox

    try:
        busybox = find_busybox()
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(dir=store.tmp_dir, prefix="demo-") as tmp:
        for spec in (BUSYBOX, HTTPD):
            built = build(spec, Path(tmp), busybox)
            for img in store.import_archive(built.docker_archive):
                print(f"imported {', '.join(img.repo_tags)} {img.id}")
    return 0


def _cmd_pull(store: ImageStore, args: argparse.Namespace) -> int:
    import asyncio

    from cri.images import pull_image

    auth = None
    if args.creds:
        user, _, password = args.creds.partition(":")
        if not password:
            import getpass

            password = getpass.getpass(f"password for {user}: ")
        auth = {"username": user, "password": password}
    bar = _Bar(not args.no_progress, f"pull {args.ref}")
    try:
        img = asyncio.run(pull_image(store, args.ref, auth=auth, progress=bar))
    finally:
        bar.close()
    print(f"pulled {', '.join(img.repo_tags) or args.ref} {img.id}")
    return 0


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f}{unit}" if unit == "B" else f"{size:.1f}{unit}"
        size /= 1000
    return f"{n}B"


def _cmd_ls(store: ImageStore, args: argparse.Namespace) -> int:
    images = sorted(store.list(), key=lambda i: (i.repo_tags or ["~"])[0])
    if args.output == "json":
        print(json.dumps([{"id": i.id, "repoTags": i.repo_tags, "repoDigests": i.repo_digests, "size": i.size}
                          for i in images], indent=2))
        return 0
    if args.quiet:
        for i in images:
            print(i.id)
        return 0
    rows = [("IMAGE", "TAG", "IMAGE ID", "SIZE")]
    for i in images:
        names = i.repo_tags or [f"{d.split('@')[0]}:<none>" for d in i.repo_digests[:1]] or ["<none>:<none>"]
        for name in names:
            repo, _, tag = name.rpartition(":")
            rows.append((repo, tag, i.id[7:20], _human(i.size)))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    for r in rows:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    return 0


def _cmd_rm(store: ImageStore, args: argparse.Namespace) -> int:
    rc = 0
    for ref in args.refs:
        if store.remove(ref):
            print(f"removed {ref}")
        else:
            print(f"error: image {ref!r} not found", file=sys.stderr)
            rc = 1
    return rc


def _cmd_inspect(store: ImageStore, args: argparse.Namespace) -> int:
    img = store.resolve(args.ref)
    if img is None:
        print(f"error: image {args.ref!r} not found", file=sys.stderr)
        return 1
    print(json.dumps({"id": img.id, "repoTags": img.repo_tags, "repoDigests": img.repo_digests,
                      "size": img.size, "manifestDigest": img.manifest_digest, "os": img.os,
                      "architecture": img.architecture, "config": img.config, "diffIds": img.diff_ids,
                      "layers": [str(p) for p in img.layers]},
                     indent=2))
    return 0


_COMMANDS = {"import": _cmd_import, "pull": _cmd_pull, "ls": _cmd_ls, "rm": _cmd_rm, "inspect": _cmd_inspect,
             "demo": _cmd_demo, "build": _cmd_build}
