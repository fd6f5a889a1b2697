"""Storage latency through the whole node: a fresh dynamic volume per pod, beside the same pod on an emptyDir.

It starts `nodeagent up` under a private data dir (own sockets, bridge, subnet, cgroup root, its own
`<data dir>/storage` for local-path volumes), imports the busybox test image (no pull is timed) and, one
claim at a time (--claims of them), creates a PersistentVolumeClaim of a StorageClass and a pod using it
(no spec.nodeName: the scheduler's VolumeBinding picks the node and, for WaitForFirstConsumer classes,
selects it on the claim), timing on watches:

  claim create → Bound      the binder, the scheduler's selected-node, the provisioner's directory and PV
  pod create → Running      the same plus the kubelet mounting the claim and starting the container

For the floor, the same pod with an emptyDir instead of a claim (create → Running) in the same run. The
storage classes measured are pluggable (--provisioner, repeatable): each is a `Provisioner` in
PROVISIONERS with the StorageClass its claims name and an optional setup that brings it up first
(`local-path`, and `csi-hostpath`: the CSI driver `up` runs, called the CSI way). Pods and claims are
deleted after each class's run, and the run waits until every volume is gone (Delete reclaim) before the
next. Run as root; the load average is printed beside
the figures (the machine may be shared).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.pod_startup import running, start_up
from bench.report import add_plot_argument, latency_table, plot_cdf

BUSYBOX = "localhost/busybox:latest"


@dataclasses.dataclass(frozen=True)
class Provisioner:
    """A StorageClass to measure: `setup(kubeconfig, data_dir)` readies it (None: the server's own)."""
    name: str
    storage_class: str
    setup: Callable[[Path, Path], None] | None = None


PROVISIONERS: dict[str, Provisioner] = {
    "local-path": Provisioner("local-path", "local-path"),  # the default class `up` creates
    # the CSI driver `up` runs and registers with its kubelet: CreateVolume, NodeStage and NodePublish
    "csi-hostpath": Provisioner("csi-hostpath", "csi-hostpath"),
}


def claim(name: str, storage_class: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
                     "resources": {"requests": {"storage": "16Mi"}}}}


def pod(name: str, volume: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                                     "command": ["sleep", "3600"],
                                     "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                     "volumes": [{"name": "data", **volume}]}}


async def measure(kubeconfig: Path, prefix: str, n: int, storage_class: str | None) -> dict[str, list[float]]:
    """n pods one after another (each waits for the previous one's Running); with a class, each on a
    fresh claim. Returns the claim create → Bound and pod create → Running latencies."""
    from nodeagent.client.rest import Client

    client = Client.from_kubeconfig(kubeconfig)
    t_claim: dict[str, float] = {}
    t_pod: dict[str, float] = {}
    bound: dict[str, float] = {}
    ran: dict[str, float] = {}
    events: dict[str, asyncio.Event] = {}
    all_bound = asyncio.Event()
    try:
        rv_pods = (await client.list("pods", "default"))["metadata"]["resourceVersion"]
        rv_claims = (await client.list("persistentvolumeclaims", "default"))["metadata"]["resourceVersion"]

        async def watch_pods() -> None:
            async for ev in client.watch("pods", "default", resource_version=rv_pods):
                obj = ev.get("object") or {}
                name = (obj.get("metadata") or {}).get("name", "")
                if ev.get("type") in ("ADDED", "MODIFIED") and name in t_pod and name not in ran \
                        and running(obj):
                    ran[name] = time.perf_counter() - t_pod[name]
                    events[name].set()

        async def watch_claims() -> None:
            async for ev in client.watch("persistentvolumeclaims", "default", resource_version=rv_claims):
                obj = ev.get("object") or {}
                name = (obj.get("metadata") or {}).get("name", "")
                if ev.get("type") in ("ADDED", "MODIFIED") and name in t_claim and name not in bound \
                        and (obj.get("status") or {}).get("phase") == "Bound":
                    bound[name] = time.perf_counter() - t_claim[name]
                    if len(bound) == n:
                        all_bound.set()

        async with asyncio.TaskGroup() as tg:
            watchers = [tg.create_task(watch_pods()), tg.create_task(watch_claims())]
            await asyncio.sleep(0.3)
            for i in range(n):
                name = f"{prefix}-{i}"
                events[name] = asyncio.Event()
                if storage_class is not None:
                    t_claim[name] = time.perf_counter()
                    await client.create("persistentvolumeclaims", claim(name, storage_class), "default")
                    volume: dict[str, Any] = {"persistentVolumeClaim": {"claimName": name}}
                else:
                    volume = {"emptyDir": {}}
                t_pod[name] = time.perf_counter()
                await client.create("pods", pod(name, volume), "default")
                await asyncio.wait_for(events[name].wait(), 120)
            if storage_class is not None:
                await asyncio.wait_for(all_bound.wait(), 30)
            for w in watchers:
                w.cancel()
        return {"bound": [bound[k] for k in t_claim if k in bound], "running": [ran[k] for k in t_pod]}
    finally:
        await client.close()


async def node_ready(kubeconfig: Path) -> bool:
    from nodeagent.client.rest import Client, ClientError

    client = Client.from_kubeconfig(kubeconfig)
    try:
        nodes = (await client.list("nodes"))["items"]
    except (ClientError, OSError):
        return False
    finally:
        await client.close()
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for n in nodes for c in (n.get("status") or {}).get("conditions") or [])


async def clean(kubeconfig: Path, seconds: float = 300) -> None:
    """Delete every pod and claim in default; wait until pods, claims and volumes are all gone."""
    from nodeagent.client.rest import Client, ClientError

    client = Client.from_kubeconfig(kubeconfig)
    try:
        for res in ("pods", "persistentvolumeclaims"):
            for item in (await client.list(res, "default"))["items"]:
                with contextlib.suppress(ClientError):
                    await client.delete(res, item["metadata"]["name"], "default")
        kinds = (("pods", "default"), ("persistentvolumeclaims", "default"), ("persistentvolumes", None))
        async with asyncio.timeout(seconds):
            while True:
                left = [len((await client.list(r, ns))["items"]) for r, ns in kinds]
                if not any(left):
                    return
                await asyncio.sleep(0.5)
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--claims", type=int, default=100,
                   help="claims (and pods) per class (default %(default)s)")
    p.add_argument("--provisioner", action="append", choices=sorted(PROVISIONERS),
                   help="a storage class to measure (repeatable; default: all)")
    p.add_argument("--keep", action="store_true", help="keep the data dir")
    add_plot_argument(p)
    a = p.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root", file=sys.stderr)
        return 2
    from nodeagent.testing.images import ImageFactory

    root = Path(tempfile.mkdtemp(prefix="na-bench-storage-"))
    data = root / "data"
    data.mkdir()
    img = ImageFactory(root / "images").busybox
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(data / "images"), "import",
                    "--no-progress", str(img.docker_archive)], check=True, capture_output=True)
    proc = start_up(data, f"bench-pv-{os.getpid()}")
    kc = data / "admin.kubeconfig"
    results: dict[str, dict[str, list[float]]] = {}
    try:
        end = time.monotonic() + 120
        while not kc.exists() or not asyncio.run(node_ready(kc)):
            if proc.poll() is not None or time.monotonic() > end:
                raise SystemExit(f"`up` did not start:\n{(data / 'up.log').read_text()[-3000:]}")
            time.sleep(0.5)
        asyncio.run(measure(kc, "warm", 2, None))  # the first pod pays the image's first mount
        asyncio.run(clean(kc))
        results["emptyDir (floor)"] = asyncio.run(measure(kc, "empty", a.claims, None))
        asyncio.run(clean(kc))
        for name in a.provisioner or sorted(PROVISIONERS):
            prov = PROVISIONERS[name]
            if prov.setup is not None:
                prov.setup(kc, data)
            results[name] = asyncio.run(measure(kc, name.replace(".", "-"), a.claims, prov.storage_class))
            asyncio.run(clean(kc))
    finally:
        with contextlib.suppress(Exception):
            asyncio.run(clean(kc, seconds=120))
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    load = os.getloadavg()
    print(f"storage, one claim + pod at a time, {a.claims} each; load average {load[0]:.2f} {load[1]:.2f}")
    rows: dict[str, list[float]] = {}
    for name, r in results.items():
        rows[f"{name}: pod create -> Running"] = r["running"]
        if r["bound"]:
            rows[f"{name}: claim create -> Bound"] = r["bound"]
    print(latency_table(rows))
    if a.plot:
        plot_cdf(a.plot, rows, f"storage: one claim + pod at a time, {a.claims} each")
        print(f"plot: {a.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
