"""A throwaway test topology made only of network namespaces (tests and benchmarks share it).

    client netns (192.168.<n>.2) ──veth── node netns (192.168.<n>.1, br 10.<n>.0.1/24) ──bridge── pod netns…

The proxier runs inside the node netns, so no rule ever lands in the host's root
namespace. Pods run a tiny Python server answering "<pod name> <client ip>" on
TCP and UDP ports. `close()` deletes every namespace (their veths go with them).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

SERVER = r'''
import asyncio, sys
name = sys.argv[1]
class U(asyncio.DatagramProtocol):
    def connection_made(self, t): self.t = t
    def datagram_received(self, data, addr): self.t.sendto(f"{name} {addr[0]}\n".encode(), addr)
async def tcp(r, w):
    peer = w.get_extra_info("peername")
    w.write(f"{name} {peer[0]}\n".encode())
    try:
        await w.drain()
        w.close()
    except Exception:
        pass
async def main():
    loop = asyncio.get_running_loop()
    for spec in sys.argv[2:]:
        proto, port = spec.split(":")
        if proto == "tcp":
            await asyncio.start_server(tcp, "0.0.0.0", int(port), backlog=1024, reuse_address=True)
        else:
            await loop.create_datagram_endpoint(U, local_addr=("0.0.0.0", int(port)))
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
'''

CLIENT = r'''
import json, socket, sys, time
proto, host, port, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
src_port = int(sys.argv[5]) if len(sys.argv) > 5 else 0
timeout = float(sys.argv[6]) if len(sys.argv) > 6 else 2.0
out = []
for _ in range(count):
    t0 = time.perf_counter()
    try:
        if proto == "tcp":
            s = socket.socket()
            s.settimeout(timeout)
            s.connect((host, port))
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(100)
                if not chunk:
                    break
                data += chunk
            s.close()
            out.append([data.decode().strip() or "empty", time.perf_counter() - t0])
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", src_port))
            s.settimeout(timeout)
            s.sendto(b"hi", (host, port))
            out.append([s.recv(100).decode().strip(), time.perf_counter() - t0])
            s.close()
    except ConnectionRefusedError:
        out.append(["refused", time.perf_counter() - t0])
    except OSError as e:
        why = "timeout" if isinstance(e, TimeoutError) else f"error:{e.errno}"
        out.append([why, time.perf_counter() - t0])
print(json.dumps(out))
'''

_seq = itertools.count(1)


def sh(*argv: str, check: bool = True, input: str | None = None) -> str:
    p = subprocess.run(list(argv), capture_output=True, text=True, input=input, check=False)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


class Lab:
    """One node netns with a bridge and pods, plus client netns routed through the node."""

    def __init__(self, tag: str | None = None, subnet: int | None = None) -> None:
        self.tag = tag or f"np{secrets.token_hex(2)}"
        self.n = subnet if subnet is not None else (os.getpid() + next(_seq) * 7) % 200 + 20
        self.namespaces: list[str] = []
        self.procs: list[subprocess.Popen] = []
        self.pods: dict[str, str] = {}  # name -> ip
        self.clients: dict[str, str] = {}
        self.node = self._netns("node")
        self.bridge = "br0"
        self.node_pod_ip = f"10.{self.n}.0.1"
        self.cluster_cidr = f"10.{self.n}.0.0/24"
        self.service_cidr = "10.96.0.0/16"
        self._files = Path(f"/tmp/{self.tag}-lab")
        self._files.mkdir(parents=True, exist_ok=True)
        (self._files / "server.py").write_text(SERVER)
        (self._files / "client.py").write_text(CLIENT)
        batch = [
            f"link add {self.bridge} type bridge",
            f"addr add {self.node_pod_ip}/24 dev {self.bridge}",
            f"link set {self.bridge} up",
            f"route add {self.service_cidr} dev {self.bridge}",
        ]
        self.ip_batch(self.node, batch)
        sh("ip", "netns", "exec", self.node, "sysctl", "-qw", "net.ipv4.ip_forward=1",
           "net.ipv4.conf.all.route_localnet=1")
        self._pod_seq = itertools.count(11)
        self._client_seq = itertools.count(1)
        self.node_ip: str | None = None

    def _netns(self, role: str) -> str:
        name = f"{self.tag}{role[:4]}{len(self.namespaces)}"
        sh("ip", "netns", "add", name)
        self.namespaces.append(name)
        sh("ip", "-n", name, "link", "set", "lo", "up")
        return name

    @staticmethod
    def ip_batch(netns: str, cmds: list[str]) -> None:
        sh("ip", "-n", netns, "-batch", "-", input="\n".join(cmds) + "\n")

    def add_pod(self, name: str, tcp: tuple[int, ...] = (8080,), udp: tuple[int, ...] = ()) -> str:
        ns = self._netns("pod")
        ip = f"10.{self.n}.0.{next(self._pod_seq)}"
        idx = len(self.pods)
        self.ip_batch(self.node, [
            f"link add p{idx} type veth peer name eth0 netns {ns}",
            f"link set p{idx} master {self.bridge}",
            f"link set p{idx} type bridge_slave hairpin on",  # as CNI bridge's hairpinMode
            f"link set p{idx} up",
        ])
        self.ip_batch(ns, [f"addr add {ip}/24 dev eth0", "link set eth0 up",
                           f"route add default via {self.node_pod_ip}"])
        self.pods[name] = ip
        self._pod_ns = getattr(self, "_pod_ns", {})
        self._pod_ns[name] = ns
        self.serve(ns, name, tcp, udp)
        return ip

    def pod_netns(self, name: str) -> str:
        return self._pod_ns[name]

    def serve(self, ns: str, name: str, tcp: tuple[int, ...], udp: tuple[int, ...]) -> subprocess.Popen:
        specs = [f"tcp:{p}" for p in tcp] + [f"udp:{p}" for p in udp]
        argv = ["ip", "netns", "exec", ns, sys.executable, "-S", str(self._files / "server.py"), name, *specs]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        self.procs.append(proc)
        line = proc.stdout.readline() if proc.stdout else ""
        if line.strip() != "ready":
            raise RuntimeError(f"server in {ns} failed: {proc.stderr.read() if proc.stderr else ''}")
        return proc

    def stop_pod_server(self, name: str) -> None:
        ns = self._pod_ns[name]
        for p in self.procs:
            if p.poll() is None and isinstance(p.args, list) and ns in p.args:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def add_client(self, name: str = "client") -> str:
        """A namespace outside the cluster (another "node"), routed to the node over a veth."""
        ns = self._netns("cli")
        k = next(self._client_seq)
        ip, gw = f"192.168.{self.n}.{k * 4 + 2}", f"192.168.{self.n}.{k * 4 + 1}"
        self.ip_batch(self.node, [f"link add c{k} type veth peer name eth0 netns {ns}",
                                  f"addr add {gw}/30 dev c{k}", f"link set c{k} up"])
        self.ip_batch(ns, [f"addr add {ip}/30 dev eth0", "link set eth0 up", f"route add default via {gw}"])
        self.clients[name] = ns
        self.node_ip = self.node_ip or gw
        self._client_ips = getattr(self, "_client_ips", {})
        self._client_ips[name] = (ip, gw)
        return ip

    def client_ip(self, name: str = "client") -> str:
        return self._client_ips[name][0]

    def gateway_of(self, name: str = "client") -> str:
        return self._client_ips[name][1]

    def connect(self, ns: str, proto: str, host: str, port: int, count: int = 1, src_port: int = 0,
                timeout: float = 5.0) -> list[tuple[str, float]]:
        """Run `count` connections (or UDP requests) from `ns`: [(answer | refused | timeout, seconds)]."""
        out = sh("ip", "netns", "exec", ns, sys.executable, "-S", str(self._files / "client.py"), proto, host,
                 str(port), str(count), str(src_port), str(timeout))
        return [tuple(x) for x in json.loads(out)]

    def answers(self, ns: str, proto: str, host: str, port: int, count: int = 1, **kw) -> list[str]:
        return [a for a, _ in self.connect(ns, proto, host, port, count, **kw)]

    def in_node(self, *argv: str, check: bool = True) -> str:
        return sh("ip", "netns", "exec", self.node, *argv, check=check)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
            for stream in (p.stdout, p.stderr):
                if stream:
                    stream.close()
        for ns in reversed(self.namespaces):
            sh("ip", "netns", "del", ns, check=False)
        for f in self._files.glob("*"):
            f.unlink()
        with contextlib.suppress(OSError):
            self._files.rmdir()
        deadline = time.monotonic() + 5
        while any(os.path.exists(f"/run/netns/{ns}") for ns in self.namespaces) \
                and time.monotonic() < deadline:
            time.sleep(0.05)

    def gone(self) -> bool:
        return not any(os.path.exists(f"/run/netns/{ns}") for ns in self.namespaces)


def service(name: str, cluster_ip: str, ports: list[dict], namespace: str = "default", **spec) -> dict:
    """A core/v1 Service dict (test and benchmark helper)."""
    s = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
         "spec": {"clusterIP": cluster_ip, "ports": ports, "type": spec.pop("type", "ClusterIP"), **spec}}
    return s


def endpoint_slice(service_name: str, ports: list[dict], endpoints: list[dict], namespace: str = "default",
                   name: str | None = None) -> dict:
    """A discovery.k8s.io/v1 EndpointSlice dict; endpoints: [{"ip":..., "ready":..., "node":...}]."""
    return {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
        "metadata": {"name": name or f"{service_name}-abc", "namespace": namespace,
                     "labels": {"kubernetes.io/service-name": service_name}},
        "ports": ports,
        "endpoints": [{"addresses": [e["ip"]],
                       "conditions": {"ready": e.get("ready", True),
                                      "serving": e.get("serving", e.get("ready", True)),
                                      "terminating": e.get("terminating", False)},
                       **({"nodeName": e["node"]} if e.get("node") else {})} for e in endpoints],
    }
