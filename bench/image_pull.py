"""Image import and pull latency: nodeagent's image store beside podman (containers/storage, overlay) on
the same images, from the same docker-archive and the same local docker-registry, in the same run.

Each iteration starts from an empty store (ours) / an empty podman root, so every layer is fetched,
verified and unpacked. Ours is timed in-process (what the CRI daemon pays) and through the CLI (what a
person pays, like podman's CLI figure). Run as root from the repo: .venv/bin/python bench/image_pull.py
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import CdfPanel, add_plot_argument, pct, plot_cdf_panels
from cri.images import ImageStore, RegistriesConfig, pull_image
from nodeagent.testing.images import CONFIGURED, ImageFactory


def report(name: str, samples: list[float]) -> None:
    print(f"  {name:<34} p50 {pct(samples, .5) * 1000:8.1f} ms   p99 {pct(samples, .99) * 1000:8.1f} ms"
          f"   mean {statistics.fmean(samples) * 1000:8.1f} ms")


def podman(root: Path, *args: str) -> None:
    argv = ["podman", "--root", str(root / "root"), "--runroot", str(root / "run"),
            "--storage-driver", "overlay", *args]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {p.stderr}")


def podman_reset(root: Path) -> None:
    subprocess.run(["podman", "--root", str(root / "root"), "--runroot", str(root / "run"),
                    "--storage-driver", "overlay", "system", "reset", "-f"], capture_output=True, timeout=120)
    shutil.rmtree(root, ignore_errors=True)


P = ParamSpec("P")


def timed(fn: Callable[P, object], *args: P.args, **kwargs: P.kwargs) -> float:
    t0 = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - t0


def import_in_process(state_dir: Path, archive: Path) -> None:
    ImageStore(state_dir).import_archive(archive)


def pull_in_process(state_dir: Path, registries: RegistriesConfig, name: str) -> None:
    asyncio.run(pull_image(ImageStore(state_dir, registries), name))


def nodeagent_image(state_dir: Path, *args: str) -> None:
    """`nodeagent image --state-dir <state_dir> <args>`: the CLI, as a person runs it."""
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(state_dir), *args],
                   check=True, capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--iterations", type=int, default=10, help="runs per measurement (default 10)")
    ap.add_argument("--no-podman", action="store_true", help="skip the podman reference")
    add_plot_argument(ap)
    args = ap.parse_args()
    panels: list[CdfPanel] = []
    use_podman = not args.no_podman and shutil.which("podman") is not None
    work = Path(tempfile.mkdtemp(prefix="bench-images-"))
    reg = None
    try:
        images = ImageFactory(work / "src")
        built = images.get(CONFIGURED)
        print(f"image {built.ref}: {len(built.layer_digests)} layers, {built.size / 1e6:.1f} MB compressed; "
              f"{args.iterations} runs each (shared, busy machine: compare the columns, not absolute values)")

        print("import docker-archive")
        ours, cli, ref = [], [], []
        for i in range(args.iterations):
            store_dir = work / f"s{i}"
            ours.append(timed(import_in_process, store_dir, built.docker_archive))
            shutil.rmtree(store_dir)
            cli.append(timed(nodeagent_image, store_dir, "import", "--no-progress",
                             str(built.docker_archive)))
            shutil.rmtree(store_dir)
            if use_podman:
                root = work / f"p{i}"
                ref.append(timed(podman, root, "load", "-q", "-i", str(built.docker_archive)))
                podman_reset(root)
        report("nodeagent (in-process)", ours)
        report("nodeagent image import (CLI)", cli)
        if ref:
            report("podman load (reference)", ref)
        panels.append(CdfPanel("import docker-archive", {"nodeagent (in-process)": ours,
                                                         "nodeagent image import (CLI)": cli,
                                                         "podman load (reference)": ref}))

        from tests.integration.images.registry import Registry

        reg = Registry(work / "registry")
        reg.push(built.oci_dir, built.spec.tag, "bench/configured", "v1")
        name = f"{reg.host}/bench/configured:v1"
        print(f"pull {name} (plain HTTP, local docker-registry)")
        ours, cli, ref = [], [], []
        cfg = RegistriesConfig.from_dict({"mirrors": {reg.host: {"endpoint": [f"http://{reg.host}"]}}})
        for i in range(args.iterations):
            store_dir = work / f"s{i}"
            ours.append(timed(pull_in_process, store_dir, cfg, name))
            shutil.rmtree(store_dir)
            cli.append(timed(nodeagent_image, store_dir, "pull", "--no-progress", name))
            shutil.rmtree(store_dir)
            if use_podman:
                root = work / f"p{i}"
                ref.append(timed(podman, root, "pull", "-q", "--tls-verify=false", name))
                podman_reset(root)
        report("nodeagent (in-process)", ours)
        report("nodeagent image pull (CLI)", cli)
        if ref:
            report("podman pull (reference)", ref)
        panels.append(CdfPanel(f"pull {name}", {"nodeagent (in-process)": ours,
                                                "nodeagent image pull (CLI)": cli,
                                                "podman pull (reference)": ref}))
        if args.plot:
            plot_cdf_panels(args.plot, panels, f"image {built.ref}, empty store each run")
            print(f"plot: {args.plot}")
    finally:
        if reg:
            reg.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
