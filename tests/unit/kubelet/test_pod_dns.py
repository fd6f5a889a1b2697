"""The sandbox's dns_config by dnsPolicy: what the runtime writes into the pod's /etc/resolv.conf."""

from pathlib import Path

import pytest

from nodeagent.kubelet.config import parse_cluster_dns
from nodeagent.kubelet.kuberuntime import PodRuntime
from nodeagent.kubelet.volumes.manager import VolumeManager
from nodeagent.testing.clock import FakeClock
from nodeagent.testing.fake_cri import FakeRuntime, serve
from tests.unit.kubelet.test_kuberuntime import IMG, Recorder, _c, _pod

HOST = "nameserver 192.0.2.53\nsearch corp.example lab.example\noptions edns0 timeout:2\n"


@pytest.fixture
async def rt(tmp_path: Path):
    host = tmp_path / "resolv.conf"
    host.write_text(HOST)
    clock = FakeClock(1_700_000_000.0)
    cri = FakeRuntime(images=(IMG,), clock=clock)
    rec = Recorder()
    async with serve(cri) as client:
        r = PodRuntime(client, VolumeManager(tmp_path / "kubelet"), rec, clock, log_root=tmp_path / "logs",
                       cgroup_root=("inst",), memory_capacity=8 << 30, runtime_name="fake",
                       cluster_dns=("10.96.0.10",), resolv_conf=str(host))
        yield r, cri, rec


def _dns(cfg):
    return list(cfg.dns_config.servers), list(cfg.dns_config.searches), list(cfg.dns_config.options)


def test_cluster_first_uses_cluster_dns_namespace_search_and_host_search(rt):
    r, _, _ = rt
    pod = _pod([_c("app")])
    pod["metadata"]["namespace"] = "team"
    assert _dns(r.sandbox_config(pod, 0)) == (
        ["10.96.0.10"], ["team.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example",
                         "lab.example"], ["ndots:5"])


def test_default_is_the_hosts_file(rt):
    r, _, _ = rt
    assert _dns(r.sandbox_config(_pod([_c("app")], dnsPolicy="Default"), 0)) == (
        ["192.0.2.53"], ["corp.example", "lab.example"], ["edns0", "timeout:2"])


def test_host_network_cluster_first_falls_back_to_default_but_with_host_net_does_not(rt):
    r, _, _ = rt
    assert _dns(r.sandbox_config(_pod([_c("app")], hostNetwork=True), 0))[0] == ["192.0.2.53"]
    cfg = r.sandbox_config(_pod([_c("app")], hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet"), 0)
    assert _dns(cfg)[0] == ["10.96.0.10"] and _dns(cfg)[2] == ["ndots:5"]


def test_none_takes_only_dns_config(rt):
    r, _, _ = rt
    pod = _pod([_c("app")], dnsPolicy="None",
               dnsConfig={"nameservers": ["1.2.3.4"], "searches": ["ns1.svc.cluster-domain.example"],
                          "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]})
    assert _dns(r.sandbox_config(pod, 0)) == (
        ["1.2.3.4"], ["ns1.svc.cluster-domain.example"], ["ndots:2", "edns0"])


async def test_sandbox_started_with_dns_and_limits_reported_as_event(rt):
    r, cri, rec = rt
    pod = _pod([_c("app")], dnsConfig={"nameservers": ["1.1.1.1", "8.8.8.8", "9.9.9.9"]})
    await r.sync(pod)
    cfg = next(iter(cri.sandbox_configs.values()))
    assert list(cfg.dns_config.servers) == ["10.96.0.10", "1.1.1.1", "8.8.8.8"]
    assert "DNSConfigForming" in rec.reasons()


async def test_without_cluster_dns_cluster_first_is_default(tmp_path):
    host = tmp_path / "resolv.conf"
    host.write_text(HOST)
    async with serve(FakeRuntime(images=(IMG,))) as client:
        r = PodRuntime(client, VolumeManager(tmp_path / "k"), Recorder(), FakeClock(0.0),
                       log_root=tmp_path / "l", cgroup_root=(), memory_capacity=1 << 30, runtime_name="fake",
                       resolv_conf=str(host))
        assert _dns(r.sandbox_config(_pod([_c("app")]), 0))[0] == ["192.0.2.53"]


def test_cluster_dns_flag_parsing():
    assert parse_cluster_dns("10.96.0.10, 10.96.0.11") == ("10.96.0.10", "10.96.0.11")
    assert parse_cluster_dns("") == () and parse_cluster_dns(None) == ()

    import argparse

    from nodeagent.commands import agent

    p = argparse.ArgumentParser()
    agent.add_arguments(p)
    cfg = agent.config_from_args(p.parse_args(["--data-dir", "/tmp/x", "--container-runtime-endpoint",
                                               "unix:///tmp/x.sock", "--cluster-dns", "10.96.0.10",
                                               "--server", "https://10.0.0.1:6443", "--token", "t"]))
    assert cfg.kubelet and cfg.kubelet.cluster_dns == ("10.96.0.10",)
