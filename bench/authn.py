"""Authentication cost: a ServiceAccount token (JWT signature + bound-pod check) cached and uncached, beside
the admin's static token and a client certificate (x509, O=system:masters), in the same run.

Two views: in-process (the authenticators alone, over the same objects) and end to end (GET /api over HTTPS
with keep-alive against a real `nodeagent server`; each request a new token for "uncached"). p50/p99 per
path, microseconds in-process, milliseconds end to end.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import ssl
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bench.report import CdfPanel, add_plot_argument, pct, plot_cdf_panels
from nodeagent.api import sa_token
from nodeagent.apiserver.auth import TokenFile
from nodeagent.apiserver.authn.serviceaccount import ServiceAccountAuthenticator, ServiceAccountKeys
from nodeagent.pki import key_pem, load_ca, write_private
from nodeagent.testing.apiserver import start_server


def row(name: str, xs: list[float], unit: str, scale: float) -> None:
    print(f"  {name:<34} p50 {pct(xs, 0.5) * scale:9.1f} {unit}   p99 {pct(xs, 0.99) * scale:9.1f} {unit}"
          f"   mean {statistics.mean(xs) * scale:9.1f} {unit}   n={len(xs)}")


async def in_process(n: int, tmp: Path) -> dict[str, list[float]]:
    sa = {"metadata": {"name": "default", "namespace": "ns", "uid": "sa-uid"}}
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "pod-uid"}}
    objects = {"/registry/serviceaccounts/ns/default": sa, "/registry/pods/ns/p": pod}

    async def get(key: str) -> dict[str, Any] | None:
        return objects.get(key)

    keys = ServiceAccountKeys(tmp / "pki")
    a = ServiceAccountAuthenticator(keys, get)
    now = int(time.time())
    tokens = [keys.sign(sa_token.bound_claims(keys.issuer, keys.api_audiences, sa, now, 3600, pod=pod))
              for _ in range(n)]
    static = TokenFile(tmp / "tokens.csv")
    admin = static.issue("admin", ("system:masters",))

    async def measure(header_for: Any, fn: Any) -> list[float]:
        out = []
        for i in range(n):
            h = header_for(i)
            t0 = time.perf_counter()
            user = await fn(h)
            out.append(time.perf_counter() - t0)
            assert user is not None
        return out

    async def static_auth(h: str) -> Any:
        return static.authenticate(h)

    uncached = await measure(lambda i: f"Bearer {tokens[i]}", a.authenticate)
    cached = await measure(lambda i: f"Bearer {tokens[0]}", a.authenticate)
    plain = await measure(lambda i: f"Bearer {admin}", static_auth)
    print(f"in-process, {n} calls each (µs):")
    row("ServiceAccount JWT, uncached", uncached, "µs", 1e6)
    row("ServiceAccount JWT, cached", cached, "µs", 1e6)
    row("static token (admin)", plain, "µs", 1e6)
    return {"ServiceAccount JWT, uncached": uncached, "ServiceAccount JWT, cached": cached,
            "static token (admin)": plain}


def client_cert(pki: Path, out: Path) -> tuple[Path, Path]:
    ca, ca_key = load_ca(pki / "ca.crt", pki / "ca.key")
    k = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                                     x509.NameAttribute(NameOID.COMMON_NAME, "bench-admin")]))
            .issuer_name(ca.subject).public_key(k.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1)).not_valid_after(now + dt.timedelta(hours=2))
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    crt, key = out / "bench.crt", out / "bench.key"
    write_private(crt, cert.public_bytes(serialization.Encoding.PEM))
    write_private(key, key_pem(k))
    return crt, key


async def end_to_end(n: int, tmp: Path) -> dict[str, list[float]]:
    srv = start_server(tmp / "srv", "memory", extra=["--without", "scheduler"])
    try:
        ctx = ssl.create_default_context(cafile=str(srv.ca_file))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, limit=1)) as s:
            admin = {"Authorization": f"Bearer {srv.token}"}
            for _ in range(100):  # the default ServiceAccount appears with its namespace
                r = await s.get(f"{srv.url}/api/v1/namespaces/default/serviceaccounts/default", headers=admin)
                if r.status == 200:
                    break
                await asyncio.sleep(0.1)
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bench-authn"},
                   "spec": {"automountServiceAccountToken": False,
                            "containers": [{"name": "c", "image": "busybox"}]}}
            await (await s.post(f"{srv.url}/api/v1/namespaces/default/pods", json=pod, headers=admin)).read()
            tr = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                  "spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "bench-authn"}}}
            tokens = []
            for _ in range(n):
                r = await s.post(f"{srv.url}/api/v1/namespaces/default/serviceaccounts/default/token",
                                 json=tr, headers=admin)
                tokens.append((await r.json())["status"]["token"])

            async def measure(headers_for: Any, session: aiohttp.ClientSession) -> list[float]:
                out = []
                for i in range(n):
                    t0 = time.perf_counter()
                    r = await session.get(f"{srv.url}/api", headers=headers_for(i))
                    await r.read()
                    out.append(time.perf_counter() - t0)
                    assert r.status == 200, r.status
                return out

            uncached = await measure(lambda i: {"Authorization": f"Bearer {tokens[i]}"}, s)
            cached = await measure(lambda i: {"Authorization": f"Bearer {tokens[0]}"}, s)
            static = await measure(lambda i: admin, s)
        crt, key = client_cert(srv.data_dir / "pki", tmp)
        cctx = ssl.create_default_context(cafile=str(srv.ca_file))
        cctx.load_cert_chain(str(crt), str(key))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=cctx, limit=1)) as cs:
            cert = await measure(lambda i: {}, cs)
        print(f"end to end, GET /api over HTTPS keep-alive, {n} requests each (ms):")
        row("ServiceAccount JWT, uncached", uncached, "ms", 1e3)
        row("ServiceAccount JWT, cached", cached, "ms", 1e3)
        row("static token (admin)", static, "ms", 1e3)
        row("client certificate (admin, x509)", cert, "ms", 1e3)
        return {"ServiceAccount JWT, uncached": uncached, "ServiceAccount JWT, cached": cached,
                "static token (admin)": static, "client certificate (admin, x509)": cert}
    finally:
        srv.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=500, help="calls/requests per path (default: %(default)s)")
    ap.add_argument("--no-server", action="store_true", help="in-process figures only")
    add_plot_argument(ap)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-authn-") as d:
        panels = [CdfPanel(f"in-process, {args.n} calls each", asyncio.run(in_process(args.n, Path(d))),
                           "µs", 1e6)]
        if not args.no_server:
            panels.append(CdfPanel(f"end to end, GET /api over HTTPS keep-alive, {args.n} requests each",
                                   asyncio.run(end_to_end(args.n, Path(d))), "ms", 1e3))
    if args.plot:
        plot_cdf_panels(args.plot, panels, "authentication cost per request")
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
