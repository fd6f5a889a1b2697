"""The daemons' process-wide memory settings (kernel.memory), each in a fresh interpreter."""

import subprocess
import sys

import pytest


def run(code: str) -> str:
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_pyroute2_names_resolve_without_its_package_init():
    out = run("""
import sys
from kernel.memory import lean_pyroute2
assert lean_pyroute2()
from pyroute2 import IPRoute, NetlinkError, config
import pyroute2
assert IPRoute.__module__ == "pyroute2.iproute.linux" and pyroute2.IPRoute is IPRoute
assert NetlinkError.__module__ == "pyroute2.netlink.exceptions" and pyroute2.__version__
with IPRoute() as ipr:
    assert ipr.link_lookup(ifname="lo")
try:
    pyroute2.NoSuchName
except AttributeError:
    pass
else:
    raise AssertionError("unknown names must raise AttributeError")
print("ndb" if "pyroute2.ndb.main" in sys.modules else "lean", lean_pyroute2())
""")
    assert out.split() == ["lean", "False"]  # NDB and the rest never imported; a second call does nothing


def test_lean_process_sets_tls_read_buffer_and_arenas():
    if not sys.platform.startswith("linux"):
        pytest.skip("glibc's mallopt")
    out = run("""
import asyncio.sslproto
from kernel import memory
memory.lean_process()
print(asyncio.sslproto.SSLProtocol.max_size, memory.limit_malloc_arenas(2))
""")
    assert out.split() == ["16384", "True"]


def test_tls_with_the_lean_read_buffer_carries_large_bodies_and_streams_whole():
    """16 KiB buffers: a record's ciphertext (a bit over 16 KiB) arrives in two receives; a 3 MiB body
    and a stream of many small chunks, as a watch sends, still arrive byte for byte."""
    out = run("""
import asyncio, hashlib, os, ssl, sys, tempfile
from kernel import memory
memory.lean_process()
from aiohttp import web
import aiohttp
from nodeagent.pki import self_signed

BIG = os.urandom(3 * 2**20)
LINES = [b"%d:" % i + os.urandom(i % 97).hex().encode() + b"\\n" for i in range(2000)]

async def big(req):
    return web.Response(body=BIG)

async def stream(req):
    resp = web.StreamResponse()
    await resp.prepare(req)
    for line in LINES:
        await resp.write(line)
    return resp

async def main():
    crt, key = self_signed("localhost", ("localhost",))
    d = tempfile.mkdtemp()
    open(f"{d}/c", "wb").write(crt)
    open(f"{d}/k", "wb").write(key)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(f"{d}/c", f"{d}/k")
    app = web.Application()
    app.router.add_get("/big", big)
    app.router.add_get("/stream", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx).start()
    url = f"https://127.0.0.1:{runner.addresses[0][1]}"
    cctx = ssl.create_default_context(cafile=f"{d}/c")
    cctx.check_hostname = False
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=cctx)) as s:
        async with s.get(url + "/big") as r:
            body = await r.read()
        async with s.get(url + "/stream") as r:
            got = [line async for line in r.content]
    await runner.cleanup()
    print(hashlib.sha256(body).digest() == hashlib.sha256(BIG).digest(), got == LINES)

asyncio.run(main())
""")
    assert out.split() == ["True", "True"]
