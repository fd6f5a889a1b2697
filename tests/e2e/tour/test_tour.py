"""The tour (docs/tour/): every page's commands run against a live `nodeagent up` (pages 1–8) or an
etcd-backed `nodeagent server` (page 9), their output compared by shape with what the page shows, and
each page's claims asserted on the live output. `TOUR_WRITE=1` rewrites the pages' output instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from nodeagent.layout import Layout
from tests.e2e.kubelet.test_node_up import Cluster
from tests.e2e.tour.tour_pages import TOUR, Names, missing_lines, rewrite, steps
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

REPO = TOUR.parents[1]
WRITE = os.environ.get("TOUR_WRITE") == "1"
NODE_PAGES = ["01-pause-and-namespaces.md", "02-cgroups.md", "03-pod-network.md", "04-services.md",
              "05-dns.md", "06-eviction.md", "07-static-pods.md", "08-scheduler.md"]

# What each page says, checked on the live output (default names, one string per page).
CLAIMS: dict[str, list[str]] = {
    "01-pause-and-namespaces.md": [
        r"pod/web condition met", r"web\s+2/2\s+Running",
        # pause, httpd and sleep share net, ipc and uts; their mnt namespaces differ
        r"httpd: (net:\[\d+\] ipc:\[\d+\] uts:\[\d+\]) mnt:\[(\d+)\].*\n(?s:.*)pause: \1 mnt:\[(?!\2)\d+\]"
        r"(?s:.*)\nsleep: \1 mnt:\[(?!\2)\d+\]"],
    "02-cgroups.md": [
        r"^Burstable$",
        r"^cpu\.shares:256\ncpu\.cfs_quota_us:50000\ncpu\.cfs_period_us:100000$",
        r"^cpu\.shares:358\ncpu\.cfs_quota_us:60000\ncpu\.cfs_period_us:100000$",
        r"/memory\.limit_in_bytes:134217728$", r"pod[0-9a-f-]+/memory\.limit_in_bytes:167772160$"],
    "03-pod-network.md": [
        r'"networkName": "nodeagent"', r'"ifName": "eth0"', r'"tour",\s+"web"',
        r"^eth0@if\d+\s+UP\s+10\.244\.0\.\d+/24", r"^default via 10\.244\.0\.1 dev eth0",
        r"^na0\s+UP\s+10\.244\.0\.1/24"],
    "04-services.md": [
        r"hello from busybox",
        r'-A KUBE-SERVICES -d [\d.]+/32 -p tcp -m comment --comment "tour/hello:http cluster IP" '
        r"-m tcp --dport 80 -j KUBE-SVC-[A-Z0-9]{16}",
        r"-A KUBE-SVC-[A-Z0-9]{16} .*--probability 0\.50000000000 -j KUBE-SEP-",
        r"-A KUBE-SEP-[A-Z0-9]{16} -p tcp .*-j DNAT --to-destination 10\.244\.0\.\d+:80",
        r"map service-ips", r"map service-endpoints", r"numgen random mod 2 map @service-endpoints",
        r"[\d.]+ \. tcp \. 80 \. 1 : 10\.244\.0\.\d+ \. 80"],
    "05-dns.md": [
        r"nameserver 10\.96\.0\.10", r"search tour\.svc\.cluster\.local svc\.cluster\.local cluster\.local",
        r"options ndots:5",
        r"hello\s+ClusterIP\s+([\d.]+)\s(?s:.*)Name:\s+hello\.tour\.svc\.cluster\.local\nAddress: \1$",
        r"Name:\s+db\.tour\.svc\.cluster\.local\nAddress: (10\.244\.0\.\d+)(?s:.*)"
        r"Name:\s+db-0\.db\.tour\.svc\.cluster\.local\nAddress: \1\n(?s:.*)^\1$"],
    "06-eviction.md": [
        r"memory\.available\s+│ \d+Mi\s+│ \d+Mi\s+│ <100Mi", r"nodefs\.available .*<10%",
        r"imagefs\.available .*<15%", r"MemoryPressure=False KubeletHasSufficientMemory",
        r"DiskPressure=False KubeletHasNoDiskPressure", r"PIDPressure=False KubeletHasSufficientPID",
        r'"memoryAvailableBytes": \d+'],
    "07-static-pods.md": [
        r"pod/static-web-node1 condition met", r"^file Node$", r"^mirror pod recreated$",
        r"pod/static-web-node1 condition met(?s:.*)pod/static-web-node1 condition met"],
    "08-scheduler.md": [
        r"web\s+default-scheduler\s+Successfully assigned tour/web to node1",
        r"FailedScheduling\s+0/1 nodes are available: 1 node\(s\) didn't match Pod's node affinity/selector",
        r"Scheduled\s+Successfully assigned tour/picky to node1", r"node/node1 labeled"],
    "09-etcd.md": [
        r"^/registry/pods/default/tour-pod$",
        r'\{"kind":"ConfigMap","name":"tour-config","data":\{"greeting":"hello"\}\}',
        r"^/registry/configmaps/default/tour-config$", r"^/registry/namespaces/default$",
        r"^/registry/services/specs/default/kubernetes$",
        r"^/registry/services/endpoints/default/kubernetes$",
        r"^[1-9]\d*$"],
}


def run_page(page: str, names: Names, env: dict[str, str]) -> list[str]:
    """Run the page's commands in one shell (so variables carry), each output translated back."""
    marker = f"@@tour-{uuid.uuid4().hex}@@"
    script = "set +e\n" + "".join(f"echo {marker}\n{names.to_instance(s.command)}\n"
                                  for s in steps((TOUR / page).read_text()))
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, cwd=REPO,
                       timeout=600)
    parts = p.stdout.split(marker + "\n")[1:]
    assert len(parts) == len(steps((TOUR / page).read_text())), (page, p.stdout, p.stderr)
    return [names.to_default(x) for x in parts]


def check_page(page: str, outputs: list[str]) -> None:
    path = TOUR / page
    text = path.read_text()
    live = "".join(outputs)
    if WRITE:
        path.write_text(rewrite(text, outputs))
    else:
        for step, out in zip(steps(text), outputs, strict=True):
            gone = missing_lines(step.output, out)
            assert not gone, f"{page}: `{step.command}` no longer prints {gone}; it printed:\n{out}"
    failed = [c for c in CLAIMS[page] if not re.search(c, live, re.M)]
    assert not failed, f"{page}: claims not borne out {failed}; the commands printed:\n{live}"


@pytest.fixture(scope="module")
def node(tmp_path_factory, images):
    d = tmp_path_factory.mktemp("tour")
    for img in (images.busybox, images.httpd):
        subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(d / "images"),
                        "import", "--no-progress", str(img.docker_archive)], check=True, capture_output=True)
    c = Cluster(d, unique("nd"), unique("kb"))
    try:
        c.start()
        yield c
    finally:
        c.kubectl("delete", "namespace", "tour", "--wait=true", "--timeout=120s", check=False)
        c.stop()
        subprocess.run([sys.executable, "-m", "nodeagent", "reset", "--data-dir", str(d),
                        "--grace-period", "0"], capture_output=True, timeout=180)


def _names(c: Cluster, netns: str) -> Names:
    mine, default = Layout.for_data_dir(c.data_dir), Layout.default()
    subnet = mine.cluster_cidr.rsplit(".", 1)[0] + "."
    return Names(
        commands=[(default.data_dir, mine.data_dir), ("nodeagent-$SANDBOX", f"{mine.network_name}-$SANDBOX"),
                  (" na0", f" {c.bridge}"), ("tour-nft", netns)],
        outputs=[(default.data_dir, mine.data_dir), ("nodeagent", mine.network_name), ("na0", c.bridge),
                 ("node1", c.node), ("10.244.0.", subnet), ("tour-nft", netns)],
        cgroup_root=mine.cgroup_root)


def _env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    env["NODEAGENT_DATA_DIR"] = str(data_dir)
    return env


def _converged(c: Cluster, page: str) -> None:
    """Wait until what a page reads is in place. Another `up` on this host shares the KUBE-* chain names
    and kube-dns's ClusterIP: its stop removes our Service rules until our proxier's next full sync."""
    end = time.monotonic() + 90
    while page in ("04-services.md", "05-dns.md") and time.monotonic() < end:
        nat = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True).stdout
        ready = "tour/hello:http cluster IP" in nat and nat.count('"tour/hello:http -> ') == 2
        if ready and page == "05-dns.md":
            ready = c.kubectl("-n", "tour", "exec", "web", "-c", "sidecar", "--", "nslookup",
                              "db-0.db.tour.svc.cluster.local.", check=False).count("Address") >= 2
        if ready:
            return
        time.sleep(1)


@pytest.mark.parametrize("page", NODE_PAGES)
def test_tour_page_on_a_live_node(node, page):
    netns = unique("ns")
    if page != NODE_PAGES[0] and node.kubectl("get", "namespace", "tour", check=False) == "":
        run_page(NODE_PAGES[0], _names(node, netns), _env(node.data_dir))  # run alone: the objects first
    _converged(node, page)
    try:
        check_page(page, run_page(page, _names(node, netns), _env(node.data_dir)))
    finally:
        subprocess.run(["ip", "netns", "del", netns], capture_output=True)


def test_tour_page_on_an_etcd_backed_server(tmp_path):
    from nodeagent.testing.apiserver import start_server
    from nodeagent.testing.etcd import EtcdServer, available

    reason = available()
    if reason:
        pytest.skip(reason)
    etcd = EtcdServer(name="tour").start()
    server = None
    try:
        hostport = etcd.endpoint.split("://", 1)[-1]
        # a fresh etcd's first start writes the bootstrap objects one fsync each: slow on a busy host
        server = start_server(tmp_path / "server", f"etcd://{hostport}", timeout=180)
        names = Names(commands=[("127.0.0.1:2379", hostport)], outputs=[], cgroup_root="")
        env = {**_env(tmp_path / "server"), "KUBECONFIG": str(server.kubeconfig)}
        check_page("09-etcd.md", run_page("09-etcd.md", names, env))
    finally:
        if server is not None:
            server.proc.terminate()
            server.proc.wait(timeout=30)
        etcd.stop()
