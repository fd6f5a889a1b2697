"""LoadBalancer Services in a 3-node netns lab, reached from a client on the underlay as from a laptop on the
lab's network: the address comes from the server's pool, one node answers ARP for it (the Lease holder),
Local policy keeps the client's address and the health check node port counts local endpoints, a second
Service asking for a held address and an exhausted pool are refused with events, and the address moves to
another node within 10 s of its owner's agent being killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.lab.topology import topology
from tests.e2e.cluster.lab import HTTPD, Lab, start_lab, stop_lab
from tests.integration.apiserver.conftest import KUBECTL_120, KUBECTL_132

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

WHOAMI = ["sh", "-c",
          "mkdir -p /tmp/www/cgi-bin && hostname > /tmp/www/index.html && "
          "printf '#!/bin/sh\\necho Content-Type: text/plain\\necho\\necho $REMOTE_ADDR\\n' "
          "> /tmp/www/cgi-bin/ip && chmod +x /tmp/www/cgi-bin/ip && exec httpd -f -p 80 -h /tmp/www"]


class Client:
    """A network namespace on the lab's underlay bridge, at .250: a machine beside the nodes."""

    def __init__(self, lab: Lab) -> None:
        t = lab.topo
        self.netns, self.veth = f"nalab-{t.tag}-c", f"nl{t.tag}c"
        self.address = f"{t.subnet_prefix}.250"
        sh("ip", "netns", "add", self.netns)
        sh("ip", "link", "add", self.veth, "type", "veth", "peer", "name", self.veth + "p")
        sh("ip", "link", "set", self.veth + "p", "netns", self.netns)
        sh("ip", "link", "set", self.veth, "master", t.bridge, "up")
        for argv in (("link", "set", self.veth + "p", "name", "eth0"), ("addr", "add", f"{self.address}/24",
                                                                         "dev", "eth0"),
                     ("link", "set", "eth0", "up"), ("link", "set", "lo", "up")):
            sh("ip", "-n", self.netns, *argv)

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.netns, *argv], capture_output=True, text=True,
                              check=False, timeout=30)

    def curl(self, url: str) -> tuple[int, str]:
        p = self.run("curl", "-sS", "-m", "2", "-o", "-", "-w", "\n%{http_code}", url)
        body, _, code = p.stdout.rpartition("\n")
        return int(code or 0), body.strip()

    def neighbour_mac(self, ip: str) -> str | None:
        out = self.run("ip", "-j", "neigh", "show", ip).stdout
        entries = json.loads(out or "[]")
        return next((e.get("lladdr") for e in entries if e.get("lladdr")), None)

    def close(self) -> None:
        subprocess.run(["ip", "netns", "del", self.netns], check=False)
        subprocess.run(["ip", "link", "del", self.veth], check=False, capture_output=True)


def sh(*argv: str) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, images: Any) -> Iterator[Lab]:
    base = tmp_path_factory.mktemp("lblab")
    prefix = topology(base / "lab", 3).subnet_prefix
    # four addresses: enough for the tests' Services, so the pool runs out on purpose
    lab = start_lab(base, images, 3, "host-gw",
                    server_args=("--service-lb-pool", f"{prefix}.224-{prefix}.227"),
                    agent_args=("--no-ingress",))
    try:
        yield lab
    finally:
        stop_lab(lab)


@pytest.fixture(scope="module")
def client(lab: Lab) -> Iterator[Client]:
    c = Client(lab)
    try:
        yield c
    finally:
        c.close()


def pod(name: str, node: str, app: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "web", "image": HTTPD, "imagePullPolicy": "Never",
                                     "command": WHOAMI}]}}


def lb_service(name: str, app: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"type": "LoadBalancer", "selector": {"app": app}, "ports": [{"port": 80}], **spec}}


def lb_ip(lab: Lab, name: str, timeout: float = 60) -> str:
    def got() -> str | None:
        ing = ((lab.get("service", name).get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        return ing[0]["ip"] if ing else None
    return str(lab.wait(f"an address for {name}", got, timeout))


def owner(lab: Lab, ip: str) -> str | None:
    try:
        lease = lab.get("lease", "-n", "kube-system", f"nodeagent-lb-{ip}")
    except AssertionError:
        return None
    return (lease.get("spec") or {}).get("holderIdentity") or None


def node_mac(lab: Lab, node: str) -> str:
    return lab.on_node(node, "cat", "/sys/class/net/eth0/address", check=True).stdout.strip()


def events(lab: Lab, name: str) -> list[tuple[str, str]]:
    items = lab.get("events", "--field-selector", f"involvedObject.name={name}")["items"]
    return [(e.get("reason") or "", e.get("message") or "") for e in items]


@pytest.fixture(scope="module")
def web(lab: Lab) -> str:
    for name, node in (("web-a", "node2"), ("web-b", "node3")):
        lab.apply(pod(name, node, "web"))
    lab.apply(pod("loc", "node3", "loc"))
    lab.apply(lb_service("web", "web"))
    lab.running("app=web", 2)
    lab.running("app=loc", 1)
    return lb_ip(lab, "web")


def test_address_answers_from_the_underlay_and_arp_points_at_the_owner(lab: Lab, client: Client,
                                                                       web: str) -> None:
    prefix = lab.topo.subnet_prefix
    assert web.startswith(prefix + ".22"), web
    lab.wait("web's address to answer from the client",
             lambda: client.curl(f"http://{web}/")[0] == 200, timeout=60)
    seen = {client.curl(f"http://{web}/")[1] for _ in range(12)}
    assert seen == {"web-a", "web-b"}, seen
    holder = lab.wait("web's address to have an owner", lambda: owner(lab, web), timeout=30)
    assert client.neighbour_mac(web) == node_mac(lab, holder)
    # only the owner answers: the other nodes' MACs never show up for the address
    assert lab.wait("the IPAllocated and nodeAssigned events",
                    lambda: {"IPAllocated", "nodeAssigned"} <= {r for r, _ in events(lab, "web")}, timeout=30)
    assigned = f'announcing from node "{holder}" with protocol "layer2"'
    assert assigned in {m for _, m in events(lab, "web")}


def test_clients_see_the_address(lab: Lab, web: str) -> None:
    """kubectl 1.20's and 1.32's EXTERNAL-IP column, and the Python client's status.load_balancer."""
    for kubectl in (KUBECTL_120, KUBECTL_132):
        if not Path(kubectl).exists():
            pytest.skip(f"{kubectl} is not installed (make install)")
        out = subprocess.run([kubectl, "get", "service", "web", "--no-headers"], env=lab.env,
                             capture_output=True, text=True, check=True, timeout=60).stdout.split()
        assert out[1] == "LoadBalancer" and out[3] == web, (kubectl, out)
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    api = k8s.CoreV1Api(k8s_config.new_client_from_config(lab.topo.kubeconfig))
    svc = api.read_namespaced_service("web", "default")
    assert svc.status and svc.status.load_balancer and svc.spec and svc.spec.ports
    assert [i.ip for i in svc.status.load_balancer.ingress or []] == [web]
    assert svc.spec.allocate_load_balancer_node_ports is True and svc.spec.ports[0].node_port


def test_local_policy_keeps_the_client_address_and_health_checks_count(lab: Lab, client: Client,
                                                                       web: str) -> None:
    lab.apply(lb_service("local", "loc", externalTrafficPolicy="Local"))
    ip = lb_ip(lab, "local")
    # only node3 has a ready endpoint: only it may own the address
    lab.wait("node3 to own the Local Service's address", lambda: owner(lab, ip) == "node3", timeout=30)
    code, body = lab.wait("the Local Service to answer",
                          lambda: (r := client.curl(f"http://{ip}/cgi-bin/ip"))[0] == 200 and r, timeout=60)
    # busybox httpd listens dual-stack: an IPv4 peer shows as [::ffff:a.b.c.d]
    assert body.removeprefix("[::ffff:").rstrip("]") == client.address, body  # not masqueraded
    assert client.neighbour_mac(ip) == node_mac(lab, "node3")
    hc = lab.get("service", "local")["spec"]["healthCheckNodePort"]
    by_node = {n.name: n.address for n in lab.topo.nodes}

    def health(node: str) -> tuple[int, dict[str, Any]]:
        code, text = client.curl(f"http://{by_node[node]}:{hc}/healthz")
        return code, json.loads(text) if text.startswith("{") else {}

    lab.wait("node3's health check", lambda: health("node3")[0] == 200, timeout=30)
    assert health("node3")[1] == {"service": {"namespace": "default", "name": "local"}, "localEndpoints": 1,
                                  "serviceProxyHealthy": True}
    code, got = health("node1")
    assert code == 503 and got["localEndpoints"] == 0


def test_held_address_and_exhausted_pool_are_refused_with_events(lab: Lab, web: str) -> None:
    lab.apply(lb_service("thief", "web", loadBalancerIP=web))

    def refused(name: str, text: str) -> bool:
        return any(r == "AllocationFailed" and text in m for r, m in events(lab, name))

    lab.wait("thief's refusal", lambda: refused("thief", f'"{web}" is in use by "default/web"'), timeout=30)
    assert not (lab.get("service", "thief").get("status") or {}).get("loadBalancer", {}).get("ingress")
    lab.kubectl("delete", "service", "thief")
    # web and local hold two of the four addresses: two more fit, the third waits
    for name in ("fill-1", "fill-2", "fill-3"):
        lab.apply(lb_service(name, "none"))
    lab.wait("the pool to run out", lambda: refused("fill-3", "no available IPs") or refused(
        "fill-2", "no available IPs") or refused("fill-1", "no available IPs"), timeout=30)
    pending = [n for n in ("fill-1", "fill-2", "fill-3")
               if not (lab.get("service", n).get("status") or {}).get("loadBalancer", {}).get("ingress")]
    assert len(pending) == 1, pending
    holders = [n for n in ("fill-1", "fill-2", "fill-3") if n not in pending]
    freed = lb_ip(lab, holders[0])
    lab.kubectl("delete", "service", holders[0])  # its address goes back to the pool: the waiting one gets it
    assert lb_ip(lab, pending[0]) == freed
    for n in ("fill-1", "fill-2", "fill-3"):
        lab.kubectl("delete", "service", n, "--ignore-not-found")


def test_address_moves_within_10s_when_its_owner_dies(lab: Lab, client: Client, web: str) -> None:
    lab.wait("web to answer", lambda: client.curl(f"http://{web}/")[0] == 200, timeout=60)
    first = str(lab.wait("web's owner", lambda: owner(lab, web), timeout=30))
    old_mac = node_mac(lab, first)
    assert client.neighbour_mac(web) == old_mac
    os.kill(lab.state["pids"][first], signal.SIGKILL)
    killed = time.monotonic()
    moved = None
    while time.monotonic() - killed < 20:
        client.curl(f"http://{web}/")  # traffic, as a user's would be, keeps the client's ARP entry in use
        mac = client.neighbour_mac(web)
        if mac and mac != old_mac:
            moved = time.monotonic() - killed
            break
        time.sleep(0.2)
    assert moved is not None, f"{web} still at {first}'s MAC 20 s after its agent was killed"
    print(f"\n{web} moved from {first} in {moved:.1f} s")
    new = owner(lab, web)
    assert new and new != first and client.neighbour_mac(web) == node_mac(lab, new)
    assert moved < 10, f"the address took {moved:.1f} s to move"
    lab.wait("web to answer through the new owner", lambda: client.curl(f"http://{web}/")[0] == 200,
             timeout=30)
