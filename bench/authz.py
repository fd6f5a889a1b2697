"""Authorization cost: a read authorized by RBAC over 1,000 Roles and 1,000 RoleBindings (plus the bootstrap
policy) beside the admin path (system:masters, decided before RBAC), in the same run.

Two views: in-process (the authorizer chain alone over a real watch cache) and end to end (GET of a
ConfigMap list over HTTPS with keep-alive against a real `nodeagent server`, a ServiceAccount token whose
RoleBinding is one of the 1,000 vs the admin token). p50/p99 and requests/s per path.
"""

from __future__ import annotations

import argparse
import asyncio
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp

from bench.report import CdfPanel, add_plot_argument, pct, plot_cdf_panels
from nodeagent.api.resources import builtin
from nodeagent.apiserver.authz import reconcile
from nodeagent.apiserver.authz.attributes import Attributes, Subject
from nodeagent.apiserver.authz.chain import Authorizer
from nodeagent.apiserver.cache import WatchCache
from nodeagent.apiserver.registry import Registry
from nodeagent.store.memory import MemoryStore
from nodeagent.testing.apiserver import start_server

NS = builtin("", "v1", "namespaces")
ROLES = builtin("rbac.authorization.k8s.io", "v1", "roles")
RBS = builtin("rbac.authorization.k8s.io", "v1", "rolebindings")
NAMESPACES = 50


def row(name: str, xs: list[float], unit: str, scale: float) -> None:
    rate = len(xs) / sum(xs) if sum(xs) else 0.0
    print(
        f"  {name:<38} p50 {pct(xs, 0.5) * scale:8.1f} {unit}   p99 {pct(xs, 0.99) * scale:8.1f} {unit}"
        f"   mean {statistics.mean(xs) * scale:8.1f} {unit}   {rate:10.0f} req/s   n={len(xs)}"
    )


def role(i: int) -> dict:
    return {
        "metadata": {"name": f"r{i}"},
        "rules": [
            {"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps", f"things{i}"]},
            {
                "verbs": ["create"],
                "apiGroups": ["apps"],
                "resources": ["deployments"],
                "resourceNames": [f"d{i}"],
            },
        ],
    }


def rolebinding(i: int) -> dict:
    return {
        "metadata": {"name": f"b{i}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"r{i}"},
        "subjects": [
            {"kind": "ServiceAccount", "name": f"sa{i}"},
            {"kind": "Group", "name": f"team{i % 20}", "apiGroup": "rbac.authorization.k8s.io"},
        ],
    }


async def in_process(n_objects: int, n: int) -> dict[str, list[float]]:
    store = MemoryStore()
    reg = Registry(store)
    for ns in ("default", "kube-system", "kube-public", *(f"ns{i}" for i in range(NAMESPACES))):
        await reg.create(NS, None, {"metadata": {"name": ns}})
    for i in range(n_objects):
        await reg.create(ROLES, f"ns{i % NAMESPACES}", role(i))
        await reg.create(RBS, f"ns{i % NAMESPACES}", rolebinding(i))
    cache = WatchCache(store)
    await cache.start()
    reg.cache = cache
    await reconcile.ensure(reg)
    await cache.wait_fresh()
    authz = Authorizer(cache, store.get)
    last = n_objects - 1
    sa = Subject(
        f"system:serviceaccount:ns{last % NAMESPACES}:sa{last}",
        ("system:serviceaccounts", f"system:serviceaccounts:ns{last % NAMESPACES}", "system:authenticated"),
    )
    admin = Subject("admin", ("system:masters", "system:authenticated"))
    samples: dict[str, list[float]] = {}
    read = Attributes(sa, "list", True, "", "configmaps", "", f"ns{last % NAMESPACES}")
    denied = Attributes(sa, "delete", True, "", "configmaps", "", f"ns{last % NAMESPACES}", "x")
    for subject_attrs, label in (
        (Attributes(admin, "list", True, "", "configmaps", "", "ns0"), "admin (system:masters)"),
        (read, "RBAC allowed (RoleBinding)"),
        (denied, "RBAC denied (all rules read)"),
    ):
        samples[label] = xs = []
        assert (await authz.authorize(subject_attrs))[0] == (label != "RBAC denied (all rules read)")
        for _ in range(n):
            t0 = time.perf_counter()
            await authz.authorize(subject_attrs)
            xs.append(time.perf_counter() - t0)
        row(label, xs, "µs", 1e6)
    t0 = time.perf_counter()
    authz.rbac._index = None
    authz.rbac.index()
    print(
        f"  index rebuild after an RBAC write: {(time.perf_counter() - t0) * 1e3:.1f} ms "
        f"({2 * n_objects} Roles+RoleBindings and the bootstrap policy)"
    )
    authz.rbac.close()
    await cache.stop()
    return samples


async def end_to_end(n_objects: int, n: int, tmp: Path) -> dict[str, list[float]]:
    srv = start_server(tmp / "srv", "memory")
    try:
        ctx = ssl.create_default_context(cafile=str(srv.ca_file))
        admin = {"Authorization": f"Bearer {srv.token}"}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=8)) as s:

            async def post(path: str, body: dict) -> dict:
                async with s.post(srv.url + path, json=body, headers=admin) as r:
                    out = await r.json()
                    assert r.status in (200, 201), out
                    return out

            for i in range(NAMESPACES):
                await post("/api/v1/namespaces", {"metadata": {"name": f"ns{i}"}})
            sem = asyncio.Semaphore(8)

            async def make(i: int) -> None:
                ns = f"ns{i % NAMESPACES}"
                async with sem:
                    await post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", role(i))
                    await post(
                        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", rolebinding(i)
                    )
                    if i == n_objects - 1:
                        await post(
                            f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": f"sa{i}"}}
                        )

            await asyncio.gather(*(make(i) for i in range(n_objects)))
            last = n_objects - 1
            ns = f"ns{last % NAMESPACES}"
            tok = await post(
                f"/api/v1/namespaces/{ns}/serviceaccounts/sa{last}/token",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
            )
            sa = {"Authorization": f"Bearer {tok['status']['token']}"}
            url = f"{srv.url}/api/v1/namespaces/{ns}/configmaps"
            paths = ((admin, "admin (system:masters)"), (sa, "RBAC (ServiceAccount token)"))
            times: dict[str, list[float]] = {label: [] for _, label in paths}
            for _ in range(n):  # interleaved, so a busy moment of the shared machine hits both paths
                for headers, label in paths:
                    t0 = time.perf_counter()
                    async with s.get(url, headers=headers) as r:
                        await r.read()
                        assert r.status == 200, r.status
                    times[label].append(time.perf_counter() - t0)
            for label, xs in times.items():
                row(label, xs, "ms", 1e3)
            return times
    finally:
        srv.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--objects", type=int, default=1000, help="Roles (and as many RoleBindings) (default: 1000)"
    )
    p.add_argument("-n", type=int, default=5000, help="in-process authorizations per path (default: 5000)")
    p.add_argument("--requests", type=int, default=500, help="end-to-end requests per path (default: 500)")
    p.add_argument("--no-e2e", action="store_true", help="the in-process view only")
    add_plot_argument(p)
    args = p.parse_args()
    print(f"in-process: the authorizer chain over {args.objects} Roles + {args.objects} RoleBindings")
    panels = [CdfPanel(f"in-process, the authorizer chain over {args.objects} Roles + RoleBindings",
                       asyncio.run(in_process(args.objects, args.n)), "µs", 1e6)]
    if not args.no_e2e:
        print(
            f"end to end: GET configmaps over HTTPS (keep-alive), {args.objects} Roles + RoleBindings stored"
        )
        with tempfile.TemporaryDirectory() as tmp:
            panels.append(CdfPanel("end to end, GET configmaps over HTTPS (keep-alive)",
                                   asyncio.run(end_to_end(args.objects, args.requests, Path(tmp)))))
    if args.plot:
        plot_cdf_panels(args.plot, panels, "authorization cost per request")
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
