"""Pods' /etc/resolv.conf by dnsPolicy under `nodeagent up` (its kubelet's --cluster-dns defaults to the
kube-dns Service IP, 10.96.0.10), and the seed's recipe (`nslookup` of the apiserver's Service) from a
busybox pod, answered by the cluster DNS.

`up` runs neither the DNS server nor a netproxy with a Service source, so the nslookup test starts
`nodeagent dns` on this cluster's bridge address and names it in the pod's dnsConfig (dnsPolicy None,
ClusterFirst's search list) instead of reaching it through the kube-dns ClusterIP."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from nodeagent.dns.resolvconf import parse_resolv_conf
from tests.e2e.kubelet.test_node_up import BUSYBOX, cluster  # noqa: F401  (module fixture: one `up` here)

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


def _run_pod(c, name: str, script: str, **spec) -> dict:
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
             "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1, **spec,
                      "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                                      "command": ["sh", "-c", script]}]}})
    return c


def _output(c, name: str, timeout: float = 60) -> str:
    pod = c.wait_pod(name, lambda p: (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"), timeout)
    m = pod["metadata"]
    logs = sorted(Path(c.data_dir, "pod-logs", f"{m['namespace']}_{m['name']}_{m['uid']}", "c").glob("*.log"))
    assert logs, f"no container log for {name}"
    lines = [ln.split(" ", 3) for ln in logs[-1].read_text().splitlines()]
    return "\n".join(parts[3] if len(parts) > 3 else "" for parts in lines) + "\n"


def _conf(text: str) -> tuple[list[str], list[str], list[str]]:
    rc = parse_resolv_conf(text)
    return rc.nameservers, rc.searches, rc.options


def test_resolv_conf_follows_dns_policy(cluster):  # noqa: F811
    c = cluster
    host = parse_resolv_conf(Path("/etc/resolv.conf").read_text())
    cat = "cat /etc/resolv.conf"
    pods = {
        "dns-clusterfirst": {},
        "dns-default": {"dnsPolicy": "Default"},
        "dns-none": {"dnsPolicy": "None", "dnsConfig": {"nameservers": ["192.0.2.10"], "searches": ["example.test"],
                                                         "options": [{"name": "ndots", "value": "2"}]}},
        "dns-hostnet": {"hostNetwork": True},
        "dns-hostnet-cf": {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"},
    }
    try:
        for name, spec in pods.items():
            _run_pod(c, name, cat, **spec)
        cluster_search = ["default.svc.cluster.local", "svc.cluster.local", "cluster.local"]
        cluster_search += [s for s in host.searches if s not in cluster_search]
        assert _conf(_output(c, "dns-clusterfirst")) == (["10.96.0.10"], cluster_search, ["ndots:5"])
        assert _conf(_output(c, "dns-default")) == (host.nameservers, host.searches, host.options)
        assert _conf(_output(c, "dns-none")) == (["192.0.2.10"], ["example.test"], ["ndots:2"])
        assert _conf(_output(c, "dns-hostnet")) == (host.nameservers, host.searches, host.options)
        assert _conf(_output(c, "dns-hostnet-cf")) == (["10.96.0.10"], cluster_search, ["ndots:5"])
    finally:
        c.kubectl("delete", "pods", *pods, "--wait=true", "--timeout=60s", check=False)


def _bridge_ip(bridge: str) -> str:
    out = json.loads(subprocess.run(["ip", "-j", "-4", "addr", "show", "dev", bridge], capture_output=True,
                                    text=True, check=True).stdout)
    return out[0]["addr_info"][0]["local"]


def test_nslookup_kubernetes_default_answers_the_apiservers_cluster_ip(cluster, tmp_path):  # noqa: F811
    """The seed's recipe. The cluster DNS listens on this cluster's own bridge address (port 53 there is
    ours alone); the pod names it as its nameserver with ClusterFirst's search list."""
    c = cluster
    _run_pod(c, "dns-warmup", "true")  # the bridge exists once a pod has a network
    _output(c, "dns-warmup")
    gw = _bridge_ip(c.bridge)
    log = tmp_path / "dns.log"
    with open(log, "wb") as f:
        dns = subprocess.Popen([sys.executable, "-m", "nodeagent", "dns", "--kubeconfig",
                                str(c.data_dir / "admin.kubeconfig"), "--listen", f"{gw}:53"],
                               stdout=f, stderr=subprocess.STDOUT)
    try:
        want = json.loads(c.kubectl("get", "svc", "kubernetes", "-o", "json"))["spec"]["clusterIP"]
        end = time.monotonic() + 30
        while "serving" not in log.read_text(errors="replace") and "listening" not in log.read_text(errors="replace"):
            assert dns.poll() is None and time.monotonic() < end, log.read_text()
            time.sleep(0.2)
        # Debian's busybox nslookup applies the search list to dotless names only (glibc's resolver, as
        # most programs use it, also searches `kubernetes.default` with ndots:5)
        _run_pod(c, "dns-nslookup", "nslookup kubernetes; echo ---; nslookup kubernetes.default.svc.cluster.local",
                 dnsPolicy="None",
                 dnsConfig={"nameservers": [gw], "searches": ["default.svc.cluster.local", "svc.cluster.local",
                                                              "cluster.local"],
                            "options": [{"name": "ndots", "value": "5"}]})
        out = _output(c, "dns-nslookup")
        by_search, full = out.split("---\n")
        for answer in (by_search, full):
            assert re.search(r"Name:\s+kubernetes\.default\.svc\.cluster\.local\s+Address:\s+" + re.escape(want),
                             answer), out
    finally:
        dns.terminate()
        dns.wait(15)
        c.kubectl("delete", "pods", "dns-warmup", "dns-nslookup", "--wait=true", "--timeout=60s", check=False)
