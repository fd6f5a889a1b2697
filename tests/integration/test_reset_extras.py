"""What `nodeagent reset` removes beyond pods (issue 18, the reset gaps): the data dir's ingress HAProxy,
a killed agent's multi-node pod network (routes of protocol RTPROT_NODENET, the vxlan device, the
masquerade exemption), a cgroup tree with processes still in it, and, under --all, the cluster's context
in the invoking user's kubeconfig — each on the real kernel (the pod network in a scratch netns)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from kernel.cgroups import hierarchies
from nodeagent.layout import Layout
from tests.harness.resources import unique

pytestmark = [pytest.mark.root]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_reset_stops_the_data_dirs_haproxy(tmp_path):
    from nodeagent.commands.reset_extras import haproxy_pids, stop_ingress_proxy

    haproxy = shutil.which("haproxy")
    if haproxy is None:
        pytest.skip("haproxy is not installed (make install installs it)")
    layout = Layout.for_data_dir(tmp_path)
    cfg = Path(layout.ingress_dir, "haproxy.cfg")
    cfg.parent.mkdir(parents=True)
    cfg.write_text(f"global\n    stats socket {layout.ingress_dir}/admin.sock mode 600 level admin\n"
                   "defaults\n    mode http\n    timeout client 5s\n    timeout server 5s\n"
                   f"    timeout connect 5s\nfrontend f\n    bind 127.0.0.1:{_free_port()}\n")
    proc = subprocess.Popen([haproxy, "-W", "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        end = time.monotonic() + 10
        while len(haproxy_pids(str(cfg))) < 2 and time.monotonic() < end:  # the master and its worker
            time.sleep(0.1)
        assert len(haproxy_pids(str(cfg))) >= 2
        other = Layout.for_data_dir(tmp_path / "other")
        assert stop_ingress_proxy(other) == 0  # another data dir's reset leaves it alone
        assert proc.poll() is None
        assert stop_ingress_proxy(layout) >= 2
        proc.wait(timeout=10)
        assert haproxy_pids(str(cfg)) == []
        assert not Path(layout.ingress_dir, "admin.sock").exists()
        assert stop_ingress_proxy(layout) == 0  # idempotent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_reset_removes_a_killed_agents_pod_network(res):
    ns = res.netns()

    def ip(*args: str) -> str:
        return subprocess.run(["ip", "-n", ns, *args], check=True, capture_output=True, text=True).stdout

    ip("link", "add", "under0", "type", "veth", "peer", "name", "under1")  # dummy links may be absent
    ip("addr", "add", "192.0.2.10/24", "dev", "under0")
    ip("link", "set", "under0", "up")
    ip("link", "add", "nodenet.1", "type", "vxlan", "id", "1", "dstport", "8472", "local", "192.0.2.10",
       "dev", "under0")
    ip("link", "set", "nodenet.1", "up")
    ip("route", "add", "10.250.1.0/24", "via", "192.0.2.11", "proto", "160")
    ip("route", "add", "10.250.2.0/24", "via", "192.0.2.12", "proto", "160")
    ip("route", "add", "10.99.0.0/24", "via", "192.0.2.13", "proto", "kernel")  # not ours: stays
    rule = ["-s", "10.250.0.0/16", "-d", "10.250.0.0/16", "-m", "comment", "--comment",
            "nodeagent/nodenet node=n1", "-j", "RETURN"]
    subprocess.run(["ip", "netns", "exec", ns, "iptables", "-t", "nat", "-A", "POSTROUTING", *rule],
                   check=True)
    script = ("from nodeagent.commands.reset_extras import remove_pod_network; "
              "print(remove_pod_network('10.250.0.0/16'))")
    p = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", script], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "route 10.250.1.0/24" in p.stdout and "link nodenet.1" in p.stdout
    assert "masquerade exemption of node n1" in p.stdout
    routes = ip("route", "show")
    assert "10.250." not in routes and "10.99.0.0/24" in routes
    assert "nodenet.1" not in ip("-br", "link", "show")
    nat = subprocess.run(["ip", "netns", "exec", ns, "iptables-save", "-t", "nat"], capture_output=True,
                         text=True).stdout
    assert "nodeagent/nodenet" not in nat
    again = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", script], capture_output=True,
                           text=True, timeout=60)
    assert again.returncode == 0 and again.stdout.strip() == "[]", again.stdout + again.stderr


def test_kill_tree_kills_what_is_left_and_removes_the_tree():
    from kernel.cgroups.tree import kill_tree, tree_dirs, tree_pids

    pids_mount = next((h for h in hierarchies() if Path(h, "pids.max").exists() or h.endswith("/pids")), None)
    if pids_mount is None:
        pytest.skip("no pids cgroup hierarchy")
    root = unique("cg")
    leaf = Path(pids_mount, root, "kubepods", "podx")
    leaf.mkdir(parents=True)
    proc = subprocess.Popen(["sleep", "300"])
    try:
        (leaf / "cgroup.procs").write_text(str(proc.pid))
        assert tree_pids(root) == {proc.pid}
        kill_tree(root)
        assert proc.wait(timeout=10) == -9
        assert tree_dirs(root) == []
        kill_tree(root)  # already gone is fine
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for d in sorted(Path(pids_mount, root).glob("**/"), key=lambda p: -len(str(p))):
            d.rmdir()


def test_reset_all_takes_the_clusters_context_out_of_the_users_kubeconfig(tmp_path):
    from nodeagent.apiserver.kubeconfig import merge, render

    home, data = tmp_path / "home", tmp_path / "node"
    data.mkdir()
    config = home / ".kube" / "config"
    config.parent.mkdir(parents=True)
    theirs = {"apiVersion": "v1", "kind": "Config", "current-context": "work",
              "clusters": [{"name": "work", "cluster": {"server": "https://w"}}],
              "users": [{"name": "work", "user": {"token": "w"}}],
              "contexts": [{"name": "work", "context": {"cluster": "work", "user": "work"}}]}
    context = Layout.for_data_dir(data).kube_context
    admin = render("https://127.0.0.1:6443", b"-----BEGIN CERTIFICATE-----\nx\n", "tok")
    config.write_text(merge(yaml.safe_dump(theirs), admin, context))
    config.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if k != "SUDO_USER"} | {"HOME": str(home)}
    p = subprocess.run([sys.executable, "-m", "nodeagent", "reset", "--data-dir", str(data), "--all"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"context {context} removed" in p.stdout
    assert yaml.safe_load(config.read_text()) == theirs
    assert not data.exists()
