"""Fixtures for the CNI integration tests: a CNI_PATH of our launchers + the reference plugins, networks."""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cni.install import install
from tests.harness.resources import free_subnet, sh, unique
from tests.integration.cni.invoker import Runtime

REFERENCE = "/usr/lib/cni"
pytestmark = pytest.mark.root


@pytest.fixture(scope="session")
def cni_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Our lean launchers (as `make cni-install` writes them) beside symlinks to Debian's
    reference plugins."""
    d = tmp_path_factory.mktemp("cnibin")
    install(str(d), None, sys.executable)
    for name in os.listdir(REFERENCE):
        (d / name).symlink_to(os.path.join(REFERENCE, name))
    return d


@pytest.fixture
def runtime(cni_bin: Path) -> Runtime:
    return Runtime([str(cni_bin)], {"NODEAGENT_CNI_SOCKET": "none"})


@pytest.fixture(scope="module")
def cni_daemon(tmp_path_factory: pytest.TempPathFactory):
    """A resident `nodeagent cni-daemon` on a private socket; yields the socket path."""
    import time

    sock = str(tmp_path_factory.mktemp("cnid") / "cni.sock")
    exe = os.path.join(os.path.dirname(sys.executable), "nodeagent")
    p = subprocess.Popen([exe, "cni-daemon", "--socket", sock], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not os.path.exists(sock):
        assert p.poll() is None and time.monotonic() < deadline, p.stderr.read() if p.stderr else "no socket"
        time.sleep(0.05)
    yield sock
    p.terminate()
    p.wait(timeout=10)
    assert not os.path.exists(sock)


@pytest.fixture(params=["in-process", "daemon"])
def any_runtime(request: pytest.FixtureRequest, cni_bin: Path) -> Runtime:
    """The same runtime with and without the resident daemon: results must not differ."""
    if request.param == "daemon":
        return Runtime([str(cni_bin)], {"NODEAGENT_CNI_SOCKET": request.getfixturevalue("cni_daemon")})
    return Runtime([str(cni_bin)], {"NODEAGENT_CNI_SOCKET": "none"})


@dataclass
class Net:
    name: str
    bridge: str
    subnet: ipaddress.IPv4Network
    data_dir: Path

    @property
    def gateway(self) -> str:
        return str(self.subnet.network_address + 1)

    def conf(self, plugin: str = "nodeagent-bridge", ipam: str = "nodeagent-host-local",
             version: str = "1.0.0",
             **extra: object) -> dict:
        return {"cniVersion": version, "name": self.name, "type": plugin, "bridge": self.bridge,
                "isGateway": True, "ipMasq": True, "hairpinMode": True,
                "ipam": {"type": ipam, "ranges": [[{"subnet": str(self.subnet)}]],
                         "dataDir": str(self.data_dir), "routes": [{"dst": "0.0.0.0/0"}]}, **extra}

    def conflist(self, *chained: dict, version: str = "1.0.0", **bridge_extra: object) -> dict:
        main = {**self.conf(), **bridge_extra}
        main.pop("cniVersion")
        main.pop("name")
        return {"cniVersion": version, "name": self.name, "plugins": [main, *chained]}

    def allocations(self) -> list[str]:
        d = self.data_dir / self.name
        return sorted(n for n in os.listdir(d) if n[0].isdigit() or ":" in n) if d.exists() else []

    def veths(self) -> list[str]:
        from cni.plugins.bridge import veth_prefix

        return sorted(n for n in os.listdir("/sys/class/net") if n.startswith(veth_prefix(self.name)))

    def rules(self) -> list[str]:
        """Every nat/filter rule (both backends) that names this network or this subnet."""
        out = []
        saves = ("iptables-nft-save", "iptables-legacy-save", "ip6tables-nft-save", "ip6tables-legacy-save")
        for exe, table in itertools.product(saves, ("nat", "filter")):
            text = subprocess.run([exe, "-t", table], capture_output=True, text=True).stdout
            net_prefix = str(self.subnet.network_address).rsplit(".", 1)[0] + "."
            out += [ln for ln in text.splitlines()
                    if f"net={self.name} " in ln or (net_prefix in ln and not ln.startswith("#"))]
        return out

    def assert_clean(self) -> None:
        assert self.veths() == []
        assert self.allocations() == []
        assert self.rules() == []


@pytest.fixture
def net(tmp_path: Path) -> Iterator[Net]:
    n = Net(name=unique("net"), bridge=unique("br"), subnet=free_subnet(), data_dir=tmp_path / "ipam")
    yield n
    for v in n.veths():
        subprocess.run(["ip", "link", "del", v], capture_output=True)
    subprocess.run(["ip", "link", "del", n.bridge], capture_output=True)
    from cni import iptables

    for be, v6 in itertools.product(("nft", "legacy"), (False, True)):  # a failed test's leftovers
        with contextlib.suppress(Exception):
            iptables.remove_tagged(be, "nat", "masq", lambda nn, c, i: nn == n.name, ("NA-MASQ-",), v6)
        with contextlib.suppress(Exception):
            iptables.remove_tagged(be, "nat", "portmap", lambda nn, c, i: nn == n.name,
                                   ("NA-DN-", "NA-SN-"), v6)


@pytest.fixture
def outside(res):
    """A test netns reached from the host over a veth: (netns, host-side address, its own address)."""
    ext = res.netns()
    host_end, ext_end = res.veth(peer_netns=ext)
    sub = free_subnet()
    h, e = str(sub.network_address + 1), str(sub.network_address + 2)
    sh("ip", "addr", "add", f"{h}/24", "dev", host_end)
    sh("ip", "link", "set", host_end, "up")
    sh("ip", "-n", ext, "addr", "add", f"{e}/24", "dev", ext_end)
    sh("ip", "-n", ext, "link", "set", ext_end, "up")
    return ext, h, e


def netns_path(name: str) -> str:
    return f"/run/netns/{name}"


def in_ns(ns: str, *argv: str, check: bool = True, timeout: float = 20) -> subprocess.CompletedProcess:
    p = subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{argv} in {ns} failed: {p.stdout} {p.stderr}")
    return p


def ping(ns: str, addr: str) -> bool:
    return in_ns(ns, "busybox", "ping", "-c", "1", "-W", "2", addr, check=False).returncode == 0


def json_of(obj: object) -> str:
    return json.dumps(obj)


__all__ = ["Net", "in_ns", "netns_path", "ping", "sh"]
