"""The cluster DNS reached the way a ClusterFirst pod reaches it: the kubelet's resolv.conf names the kube-dns
Service IP (10.96.0.10), the service proxy DNATs it to the DNS server, and the seed's recipe answers the
apiserver's ClusterIP.

A netns plays the pod on its node: netproxy programs that netns (as it programs a node), the DNS server
(`nodeagent dns --register-service`, which creates kube-system/kube-dns and its EndpointSlice) listens on
the host end of a veth, and the resolv.conf is the kubelet's own rendering, bind-mounted over
/etc/resolv.conf for the command only.
"""

from __future__ import annotations

import ipaddress
import json
import random
import subprocess
import sys
import time

import pytest

from kernel.iptables import backend as node_iptables_backend  # the iptables mode's backend
from nodeagent.kubelet.resolvconf import pod_resolv_conf
from nodeagent.testing.apiserver import start_server
from tests.harness.resources import sh

pytestmark = [pytest.mark.root, pytest.mark.slow]
KUBE_DNS = "10.96.0.10"


def _free_slash30() -> tuple[str, str]:
    used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    for _ in range(200):
        net = ipaddress.ip_network(f"10.252.{random.randrange(256)}.{random.randrange(64) * 4}/30")
        host, pod = (str(h) for h in net.hosts())
        if f" {host}/" not in used and f" {pod}/" not in used:
            return host, pod
    pytest.skip("no free 10.252.x.y/30 on this host")


def _in_pod(netns: str, resolv: str, *cmd: str) -> str:
    script = f'mount --bind "{resolv}" /etc/resolv.conf && exec "$@"'
    p = subprocess.run(["ip", "netns", "exec", netns, "unshare", "-m", "sh", "-c", script, "sh", *cmd],
                       capture_output=True, text=True, timeout=30)
    return p.stdout + p.stderr


def _eventually(fn, within: float = 30.0):
    end = time.monotonic() + within
    while time.monotonic() < end:
        got = fn()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"not reached in {within}s")


def test_pod_resolves_through_the_kube_dns_cluster_ip(res, tmp_path):
    srv = start_server(tmp_path / "server")
    try:
        netns = res.netns()
        host_if, pod_if = res.veth(peer_netns=netns)
        host_ip, pod_ip = _free_slash30()
        sh("ip", "addr", "add", f"{host_ip}/30", "dev", host_if)
        sh("ip", "link", "set", host_if, "up")
        sh("ip", "-n", netns, "addr", "add", f"{pod_ip}/30", "dev", pod_if)
        sh("ip", "-n", netns, "link", "set", pod_if, "up")
        sh("ip", "-n", netns, "route", "add", "default", "via", host_ip)

        dns_log = tmp_path / "dns.log"
        with open(dns_log, "wb") as f:
            dns = res.process([sys.executable, "-m", "nodeagent", "dns", "--kubeconfig", str(srv.kubeconfig),
                               "--listen", f"{host_ip}:53", "--register-service", "--service-ip", KUBE_DNS,
                               "--advertise-address", host_ip], stdout=f, stderr=subprocess.STDOUT)
        _eventually(lambda: "kube-dns" in dns_log.read_text() or dns.poll() is not None)
        assert dns.poll() is None, dns_log.read_text()
        pod = {"metadata": {"name": "debug", "namespace": "default"}, "spec": {"dnsPolicy": "ClusterFirst"}}
        resolv = tmp_path / "resolv.conf"
        resolv.write_text(pod_resolv_conf(pod, [KUBE_DNS], "cluster.local", "search lab.example\n").render())
        assert resolv.read_text().startswith(f"nameserver {KUBE_DNS}\n")
        # without the service proxy nothing answers at the Service IP
        out = _in_pod(netns, str(resolv), "timeout", "3", "busybox", "nslookup", "kubernetes")
        assert "Name:" not in out and "kubernetes.default.svc.cluster.local" not in out, out

        proxy = res.process([sys.executable, "-m", "nodeagent", "proxy", "--mode", "iptables", "--kubeconfig",
                             str(srv.kubeconfig), "--netns", netns, "--min-sync-period", "0.1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def programmed() -> bool:
            rules = subprocess.run(["ip", "netns", "exec", netns,
                                    f"iptables-{node_iptables_backend()}-save", "-t", "nat"],
                                   capture_output=True, text=True).stdout
            return KUBE_DNS in rules and host_ip in rules
        _eventually(programmed)
        assert proxy.poll() is None

        kubernetes_ip = json.loads(subprocess.run(["kubectl", "get", "svc", "kubernetes", "-o", "json"],
                                                  env=srv.env(), capture_output=True, text=True,
                                                  check=True).stdout)["spec"]["clusterIP"]

        # the recipe through glibc's resolver (ndots:5 + the search list, as a pod's programs resolve)
        out = _in_pod(netns, str(resolv), "getent", "hosts", "kubernetes.default")
        assert out.split() == [kubernetes_ip, "kubernetes.default.svc.cluster.local"], out
        # busybox nslookup, asking the kube-dns Service IP (it searches dotless names only)
        out = _in_pod(netns, str(resolv), "busybox", "nslookup", "kubernetes")
        assert f"Server:\t\t{KUBE_DNS}" in out and f"Address: {kubernetes_ip}" in out, out
    finally:
        srv.stop()
