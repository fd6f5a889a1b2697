"""Pods' /etc/resolv.conf by dnsPolicy under `nodeagent up` (its kubelet's --cluster-dns defaults to the
kube-dns Service IP, 10.96.0.10), and the seed's recipe (`nslookup` of the apiserver's Service) from a
busybox pod, answered by the cluster DNS.

`up` runs the DNS server (on a port of its own for a non-default data dir) and registers it as the
kube-dns Service's endpoint; its netproxy DNATs the ClusterIP there."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent.kubelet.resolvconf import parse_resolv_conf
from nodeagent.testing.images import dnsutils_spec
from tests.e2e.kubelet.test_node_up import BUSYBOX, HTTPD, cluster  # noqa: F401 - the module fixture

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
    pods: dict[str, dict[str, Any]] = {
        "dns-clusterfirst": {},
        "dns-default": {"dnsPolicy": "Default"},
        "dns-none": {"dnsPolicy": "None", "dnsConfig": {"nameservers": ["192.0.2.10"],
                                                        "searches": ["example.test"],
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


def test_nslookup_kubernetes_default_answers_the_apiservers_cluster_ip(cluster, images):  # noqa: F811
    """The seed's recipe, the way a pod really resolves: ClusterFirst's nameserver is the kube-dns ClusterIP,
    which `up`'s netproxy sends to the DNS server `up` runs. With bind's nslookup, as the Kubernetes docs'
    dnsutils pod has it (busybox's nslookup does not search dotted names such as `kubernetes.default`)."""
    c = cluster
    want = json.loads(c.kubectl("get", "svc", "kubernetes", "-o", "json"))["spec"]["clusterIP"]
    if not Path("/usr/bin/nslookup").exists():
        pytest.skip("bind9-dnsutils is not installed (make deps installs it)")
    dnsutils = images.get(dnsutils_spec())
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir",
                    str(c.data_dir / "images"), "import",
                    "--no-progress", str(dnsutils.docker_archive)], check=True, capture_output=True)
    script = ("for i in $(seq 120); do "
              "/usr/bin/nslookup kubernetes.default >/tmp/a 2>&1 && break; sleep 0.5; done; "
              "cat /tmp/a; echo ---; /usr/bin/nslookup kubernetes; echo ---; cat /etc/resolv.conf")
    try:
        c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dnsutils"},
                 "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                          "containers": [{"name": "c", "image": dnsutils.ref, "imagePullPolicy": "Never",
                                          "command": ["sh", "-c", script]}]}})
        out = _output(c, "dnsutils", timeout=120)
        dotted, dotless, resolv = out.split("---\n")
        assert "nameserver 10.96.0.10" in resolv, out  # ClusterFirst: asked through the kube-dns ClusterIP
        for answer in (dotted, dotless):
            named = r"Name:\s+kubernetes\.default\.svc\.cluster\.local\s+Address:\s+" + re.escape(want)
            assert re.search(named, answer), out
            assert "Server:\t\t10.96.0.10" in answer, out
    finally:
        c.kubectl("delete", "pods", "dnsutils", "--wait=true", "--timeout=60s", check=False)


def test_a_service_is_reached_by_name_from_a_pod(cluster):  # noqa: F811
    """Pod → cluster DNS → ClusterIP → netproxy's DNAT → the backend pod, all inside one `up`."""
    c = cluster
    c.apply({"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "svc-backend", "labels": {"app": "svc-web"}},
             "spec": {"terminationGracePeriodSeconds": 1,
                      "containers": [{"name": "httpd", "image": HTTPD, "imagePullPolicy": "Never",
                                      "ports": [{"name": "http", "containerPort": 80}]}]}})
    # not c.apply: that binds pods by spec.nodeName, a field a Service does not have (kubectl 1.32's
    # strict field validation refuses it, as kube-apiserver does)
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc-web"},
           "spec": {"selector": {"app": "svc-web"}, "ports": [{"port": 8080, "targetPort": "http"}]}}
    c.kubectl("apply", "-f", "-", input=yaml.safe_dump(svc))
    try:
        # busybox-static cannot resolve through libc (no NSS when static): its own nslookup does the lookup
        # (and its wget -T crashes: busybox timeout bounds it instead)
        _run_pod(c, "svc-client",
                 "for i in $(seq 60); do "
                 "ip=$(nslookup svc-web 2>/dev/null | awk '/^Address: /{print $2}' | head -1); "
                 "[ -n \"$ip\" ] && timeout 5 wget -qO- http://$ip:8080/ && exit 0; sleep 0.5; done; exit 1")
        out = _output(c, "svc-client", timeout=90)
        assert "hello" in out, out
    finally:
        c.kubectl("delete", "pods", "svc-client", "svc-backend", "--wait=true", "--timeout=60s", check=False)
        c.kubectl("delete", "service", "svc-web", check=False)


@pytest.mark.parametrize("kubeconfig,user,reads,refused", [
    ("coredns.kubeconfig", "system:serviceaccount:kube-system:coredns",
     [("list", "services", "-A"), ("watch", "endpointslices.discovery.k8s.io", "-A"), ("list", "pods", "-A")],
     [("create", "services", "-n", "kube-system"), ("update", "endpointslices.discovery.k8s.io", "-n",
                                                    "kube-system"), ("get", "secrets", "-A")]),
    ("netpol.kubeconfig", "system:serviceaccount:kube-system:kube-router",
     [("watch", "networkpolicies.networking.k8s.io", "-A"), ("list", "namespaces")],
     [("create", "networkpolicies.networking.k8s.io", "-n", "default"), ("list", "secrets", "-A")]),
    ("ingress.kubeconfig", "system:serviceaccount:kube-system:ingress-nginx",
     [("list", "ingresses.networking.k8s.io", "-A"),
      ("update", "ingresses.networking.k8s.io", "--subresource=status", "-A")],
     [("update", "ingresses.networking.k8s.io", "-A"), ("create", "secrets", "-n", "default")]),
])
def test_dns_netpol_and_ingress_run_under_their_own_accounts(cluster, kubeconfig, user, reads,  # noqa: F811
                                                             refused):
    """Issue 21 item 4: `up` hands these components kubeconfigs of their ServiceAccounts (the apiserver writes
    them); the API answers for that user, which may do what the component does and no more (DNS does not
    write its own Service: the installer's bootstrap does)."""
    c = cluster
    path = str(Path(c.data_dir, kubeconfig))
    cfg = yaml.safe_load(Path(path).read_text())
    assert [u["name"] for u in cfg["users"]] == [user]

    def can(*args: str) -> str:
        p = subprocess.run(["kubectl", "--kubeconfig", path, "auth", "can-i", *args], capture_output=True,
                           text=True, env=c.env)
        return p.stdout.split(" - ")[0].strip()  # "no - <the authorizer's reason>"

    for args in reads:
        assert can(*args) == "yes", args
    for args in refused:
        assert can(*args) == "no", args
    svc = json.loads(c.kubectl("get", "service", "kube-dns", "-n", "kube-system", "-o", "json"))
    assert svc["spec"]["clusterIP"] == "10.96.0.10"
    sl = json.loads(c.kubectl("get", "endpointslice", "kube-dns-nodeagent-dns", "-n", "kube-system", "-o",
                              "json"))
    assert sl["endpoints"][0]["addresses"] and sl["ports"][0]["port"] > 0


def test_the_kubelet_runs_as_its_node(cluster):  # noqa: F811
    """`up`'s kubelet is system:node:<name> in system:nodes, as a joined node's: its pods run (every test here
    and in test_node_up), while the Node authorizer keeps it from Secrets no pod of its refers to."""
    c = cluster
    path = str(Path(c.data_dir, "kubelet.kubeconfig"))
    assert [u["name"] for u in yaml.safe_load(Path(path).read_text())["users"]] == [f"system:node:{c.node}"]

    def can(*args: str) -> str:
        return subprocess.run(["kubectl", "--kubeconfig", path, "auth", "can-i", *args], capture_output=True,
                              text=True, env=c.env).stdout.split(" - ")[0].strip()

    c.kubectl("create", "secret", "generic", "nobodys", "--from-literal=k=v")
    try:
        assert can("get", "secret/nobodys") == "no"
        assert can("list", "secrets", "-A") == "no"
        assert can("patch", f"node/{c.node}") == "yes" and can("patch", "node/someone-else") == "no"
        assert can("get", "configmap/kube-root-ca.crt", "-n", "kube-system") == "yes"
    finally:
        c.kubectl("delete", "secret", "nobodys")
