"""From a pod's network namespace, with the resolv.conf the kubelet would write (ClusterFirst), cluster
names resolve over real traffic: the seed's `nslookup kubernetes.default` recipe. glibc (getent) applies
ndots:5 and the search list as a pod's programs do; Debian's busybox nslookup searches dotless names only.

The pod is a netns joined to the host by a veth; `nodeagent dns` listens on the host end's address.
The resolv.conf is bind-mounted over /etc/resolv.conf in a private mount namespace of the command only.
"""

from __future__ import annotations

import ipaddress
import random
import re
import subprocess
import sys

import pytest

from nodeagent.kubelet.resolvconf import pod_resolv_conf
from tests.harness.resources import sh

from .conftest import eventually

pytestmark = [pytest.mark.root, pytest.mark.e2e]


def free_slash30() -> tuple[str, str]:
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    for _ in range(200):
        net = ipaddress.ip_network(f"10.251.{random.randrange(256)}.{random.randrange(64) * 4}/30")
        host, pod = (str(h) for h in net.hosts())
        if f" {host}/" not in used and f" {pod}/" not in used:
            return host, pod
    pytest.skip("no free 10.251.x.y/30 on this host")


def in_pod(netns: str, resolv: str, *cmd: str) -> str:
    script = f'mount --bind "{resolv}" /etc/resolv.conf && exec "$@"'
    p = subprocess.run(["ip", "netns", "exec", netns, "unshare", "-m", "sh", "-c", script, "sh", *cmd],
                       capture_output=True, text=True, timeout=30)
    return p.stdout + p.stderr


def test_nslookup_from_a_pod_netns(res, server, upstream, api, tmp_path):
    netns = res.netns()
    host_if, pod_if = res.veth(peer_netns=netns)
    host_ip, pod_ip = free_slash30()
    sh("ip", "addr", "add", f"{host_ip}/30", "dev", host_if)
    sh("ip", "link", "set", host_if, "up")
    sh("ip", "-n", netns, "addr", "add", f"{pod_ip}/30", "dev", pod_if)
    sh("ip", "-n", netns, "link", "set", pod_if, "up")

    log = tmp_path / "dns.log"
    with open(log, "wb") as f:
        proc = res.process([sys.executable, "-m", "nodeagent", "dns", "--kubeconfig", str(server.kubeconfig),
                            "--listen", f"{host_ip}:53", "--upstream", f"127.0.0.1:{upstream.port}"],
                           stdout=f, stderr=subprocess.STDOUT)
    assert eventually(lambda: "serving on" in log.read_text() or proc.poll() is not None), log.read_text()
    assert proc.poll() is None, log.read_text()

    kubernetes_ip = api(lambda c: c.get("services", "kubernetes", "default"))["spec"]["clusterIP"]
    pod = {"metadata": {"name": "debug", "namespace": "default"}, "spec": {"dnsPolicy": "ClusterFirst"}}
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(pod_resolv_conf(pod, [host_ip], "cluster.local", "search lab.example\n").render())

    # the libc resolver a pod's programs use: ndots:5 sends the name through the search list
    out = in_pod(netns, str(resolv), "getent", "hosts", "kubernetes.default")
    assert out.split() == [kubernetes_ip, "kubernetes.default.svc.cluster.local"], out
    # busybox's own nslookup applies the search list to dotless names
    out = in_pod(netns, str(resolv), "busybox", "nslookup", "kubernetes")
    assert re.search(r"Name:\s+kubernetes\.default\.svc\.cluster\.local\s+Address:\s+"
                     + re.escape(kubernetes_ip), out), out
    out = in_pod(netns, str(resolv), "busybox", "nslookup", "kubernetes.default.svc.cluster.local")
    assert re.search(r"Address:\s+" + re.escape(kubernetes_ip), out), out
    out = in_pod(netns, str(resolv), "busybox", "nslookup", "www.example.test")
    assert "203.0.113.10" in out, out  # forwarded to the upstream
    out = in_pod(netns, str(resolv), "busybox", "nslookup", "nope.default.svc.cluster.local")
    assert "NXDOMAIN" in out, out

    proc.terminate()
    proc.wait(15)
    assert proc.returncode == 0, log.read_text()
