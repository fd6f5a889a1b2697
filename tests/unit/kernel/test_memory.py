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
    assert out.split() == ["32768", "True"]
