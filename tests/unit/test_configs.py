"""Component configs: built once from a command's flags, frozen, and a bad value is a CLI error that says
which one, before anything starts."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from nodeagent.commands import agent, cri, dns, netpol, proxy, server, up
from nodeagent.commands.up import COMPONENTS, NODE_COMPONENTS


def _parse(module, argv):
    p = argparse.ArgumentParser()
    module.add_arguments(p)
    return p.parse_args(argv)


def _up(tmp_path, *argv):
    return up.config_from_args(_parse(up, ["--data-dir", str(tmp_path), *argv]))


def _agent(tmp_path, *argv):
    return agent.config_from_args(_parse(agent, ["--data-dir", str(tmp_path), "--server",
                                                 "https://10.0.0.1:6443",
                                                 "--token", "abcdef.0123456789abcdef", *argv]))


def _server(tmp_path, *argv):
    return server.config_from_args(_parse(server, ["--data-dir", str(tmp_path), *argv]))


@pytest.mark.parametrize(("argv", "says"), [
    (["--eviction-hard", "memory.available<lots"], "eviction"),
    (["--kubelet-port", "70000"], "kubelet port 70000"),
    (["--cluster-dns", "10.96.0.10,dns.example"], "'dns.example' is not an IP address"),
    (["--bridge", "a-bridge-name-too-long"], "bridge 'a-bridge-name-too-long'"),
    (["--node-ip", "eth1"], "--node-ip 'eth1'"),
    (["--housekeeping-interval", "-1"], "housekeeping_interval"),
    (["--port", "99999"], "apiserver port 99999"),
    (["--cluster-cidr", "10.0.0.0/33"], "--cluster-cidr"),
    (["--allowed-unsafe-sysctls", "net.core.somaxconn,vm.swappiness"],
     "the sysctl 'vm.swappiness' is not known to be namespaced"),
])
def test_up_refuses_a_bad_flag_naming_it(tmp_path, argv, says):
    with pytest.raises(SystemExit, match=says):
        _up(tmp_path, *argv)


def test_agent_refuses_a_bad_pod_subnet(tmp_path):
    with pytest.raises(SystemExit, match="nodeagent agent: pod network subnet"):
        _agent(tmp_path, "--pod-subnet", "10.9.8.0/40")


@pytest.mark.parametrize(("argv", "says"), [
    (["--controllers", "*,-podgc,nosuchcontroller"], "unknown controller 'nosuchcontroller'"),
    (["--service-cluster-ip-range", "10.96.0.0/99"], "service cluster IP range"),
    (["--advertise-address", "not-an-ip"], "nodeagent server: dns"),
    (["--cluster-cidr", "nope"], "cluster CIDR"),
])
def test_server_refuses_a_bad_flag(tmp_path, argv, says):
    with pytest.raises(SystemExit, match=says):
        _server(tmp_path, *argv)


def test_scheduler_config_is_read_at_start_and_a_bad_one_refused(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("extenders:\n- urlPrefix: http://127.0.0.1:1/x\n  filterVerb: filter\n")
    cfg = _server(tmp_path / "d", "--scheduler-config", str(good))
    assert cfg.scheduler is not None and cfg.scheduler.profile == str(good)
    bad = tmp_path / "bad.yaml"
    bad.write_text("extenders:\n- urlPrefix: http://x\n  prioritizeVerb: p\n")
    with pytest.raises(SystemExit, match="--scheduler-config .*must have a positive weight"):
        _server(tmp_path / "d", "--scheduler-config", str(bad))
    with pytest.raises(SystemExit, match="nodeagent up: --scheduler-config .*No such file"):
        _up(tmp_path / "u", "--scheduler-config", str(tmp_path / "missing.yaml"))


def test_single_component_commands_refuse_bad_values(tmp_path):
    with pytest.raises(SystemExit, match="nodeagent proxy: proxy: .*'nope'"):
        proxy.config_from_args(_parse(proxy, ["--node-ip", "nope"]))
    with pytest.raises(SystemExit, match="nodeagent dns: dns"):
        dns.config_from_args(_parse(dns, ["--upstream", "192.0.2.1:fifty-three"]))
    with pytest.raises(SystemExit, match="nodeagent netpol: netpol sync periods"):
        netpol.config_from_args(_parse(netpol, ["--sync-period", "-5"]))
    with pytest.raises(SystemExit, match="nodeagent cri: cri: socket is empty"):
        cri.config_from_args(_parse(cri, ["--socket", ""]))


def _frozen(obj: object) -> bool:
    """Whether `obj`'s class is a frozen dataclass (its dataclass parameters are not typed)."""
    params = getattr(type(obj), "__dataclass_params__", None)
    return params is not None and params.frozen


def test_every_component_gets_its_own_frozen_config(tmp_path):
    cfg = _up(tmp_path)
    configs = cfg.by_component()
    assert set(configs) == {c.name for c in COMPONENTS}
    assert len({id(c) for c in configs.values()}) == len(configs)
    for name, c in configs.items():
        assert dataclasses.is_dataclass(c) and _frozen(c), name
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.kubelet.node_name = "other"
    assert set(_agent(tmp_path).by_component()) == {c.name for c in NODE_COMPONENTS}
    assert set(_server(tmp_path, "--without", "dns").by_component()) == {
        "apiserver", "scheduler", "controllers", "podnetwork", "ingress"}


def test_the_ingress_serves_on_every_node_and_manages_once(tmp_path):
    """`up`: the proxy and the statuses in one component; `agent`: the proxy only; `server`: the statuses
    only (its node's agent serves the traffic); a throwaway instance gets free ports, not 80/443."""
    up_ing, agent_ing = _up(tmp_path).ingress, _agent(tmp_path).ingress
    server_ing = _server(tmp_path).ingress
    assert up_ing and agent_ing and server_ing
    assert (up_ing.run_proxy, up_ing.manage) == (True, True)
    assert (agent_ing.run_proxy, agent_ing.manage) == (True, False)
    assert (server_ing.run_proxy, server_ing.manage) == (False, True)
    assert {up_ing.http_port, up_ing.https_port}.isdisjoint({80, 443})
    assert up_ing.http_port != up_ing.https_port
    assert _up(tmp_path, "--no-ingress").ingress is not None  # the control-plane part stays
    assert not _up(tmp_path, "--no-ingress").ingress.run_proxy
    assert _agent(tmp_path, "--no-ingress").ingress is None
    pinned = _up(tmp_path, "--ingress-http-port", "8080", "--ingress-https-port", "8443").ingress
    assert pinned and (pinned.http_port, pinned.https_port) == (8080, 8443)


def test_up_s_node_parts_use_the_node_s_credential_and_an_agent_its_own(tmp_path):
    cfg = _up(tmp_path)
    own = str(tmp_path / "kubelet.kubeconfig")  # the node's, as `agent`'s (system:node:<name>)
    for c in (cfg.kubelet, cfg.nodenet, cfg.podcidr, cfg.lbspeaker):
        assert c.credentials.kubeconfig == own
    assert cfg.netproxy.credentials.kubeconfig == str(tmp_path / "kube-proxy.kubeconfig")
    # DNS, netpol and ingress as their ServiceAccounts (CoreDNS's, kube-router's, ingress-nginx's)
    assert cfg.dns.kubeconfig == str(tmp_path / "coredns.kubeconfig") and not cfg.dns.register_service
    assert cfg.netpol.credentials.kubeconfig == str(tmp_path / "netpol.kubeconfig")
    assert cfg.ingress.credentials.kubeconfig == str(tmp_path / "ingress.kubeconfig")
    # the scheduler and the controller manager under their own identities, their kubeconfigs written by the
    # apiserver (issue 21 item 4)
    assert cfg.scheduler.kubeconfig == str(tmp_path / "scheduler.kubeconfig")
    assert cfg.controllers.kubeconfig == str(tmp_path / "controller-manager.kubeconfig")
    assert cfg.controllers.use_service_account_credentials
    assert {(c.path, c.user) for c in cfg.apiserver.components} == {
        (cfg.scheduler.kubeconfig, "system:kube-scheduler"),
        (cfg.controllers.kubeconfig, "system:kube-controller-manager"),
        (cfg.netproxy.credentials.kubeconfig, "system:kube-proxy"),
        (cfg.dns.kubeconfig, "system:serviceaccount:kube-system:coredns"),
        (cfg.netpol.credentials.kubeconfig, "system:serviceaccount:kube-system:kube-router"),
        (cfg.ingress.credentials.kubeconfig, "system:serviceaccount:kube-system:ingress-nginx"),
        (own, f"system:node:{cfg.kubelet.node_name}"),
        (str(tmp_path / "snapshot-controller.kubeconfig"),
         "system:serviceaccount:kube-system:snapshot-controller")}
    assert cfg.kubelet.snapshot_credentials.kubeconfig == str(tmp_path / "snapshot-controller.kubeconfig")
    (node,) = [c for c in cfg.apiserver.components if c.path == own]
    assert node.groups == ("system:nodes",)
    (dns,) = [c for c in cfg.apiserver.components if c.path == cfg.dns.kubeconfig]
    assert dns.groups == ("system:serviceaccounts", "system:serviceaccounts:kube-system")
    joined = agent.config_from_args(_parse(agent, ["--data-dir", str(tmp_path), "--server",
                                                   "https://10.0.0.1:6443",
                                                   "--token", "t"]), node_kubeconfig="/n/kubelet.kubeconfig")
    assert joined.kubelet and joined.kubelet.credentials.kubeconfig == "/n/kubelet.kubeconfig"
    assert not joined.kubelet.credentials.token
    plain = _agent(tmp_path)
    assert (plain.netproxy.credentials.server, plain.netproxy.credentials.token) == (
        "https://10.0.0.1:6443", "abcdef.0123456789abcdef")


def test_a_throwaway_instance_cleans_up_and_serves_dns_on_its_own_port(tmp_path):
    cfg = _up(tmp_path)
    assert cfg.netproxy.cleanup_on_stop and cfg.dns.listen != "0.0.0.0:53"
    assert cfg.dns.retry_bind and cfg.dns.advertise_address and not cfg.dns.register_service
    # the installer (the apiserver's bootstrap) points kube-dns at that port, not the DNS server itself
    addon = cfg.apiserver.dns_addon
    assert addon is not None and addon.cluster_ip == "10.96.0.10"
    assert (addon.endpoint_ip, f"0.0.0.0:{addon.port}") == (cfg.dns.advertise_address, cfg.dns.listen)
    assert cfg.netpol.table == cfg.layout.netpol_table and cfg.netpol.chain_prefix.startswith("NA")


def test_an_external_runtime_replaces_ours(tmp_path):
    cfg = _up(tmp_path, "--container-runtime-endpoint", "unix:///run/containerd/containerd.sock")
    assert cfg.cri is None and cfg.kubelet.runtime_endpoint == "unix:///run/containerd/containerd.sock"
    assert cfg.by_component()["cri"] == "unix:///run/containerd/containerd.sock"
    (stand_in,) = [c for c in cfg.components(COMPONENTS) if c.name == "cri"]
    assert stand_in.target == "nodeagent.commands.configs:external_runtime" and stand_in.load() is not None


def test_every_entry_point_is_a_serve_in_a_service_module():
    """`<package>/service.py`, or `<package>/<component>_service.py` where a package has several."""
    targets = {c.target for c in COMPONENTS + NODE_COMPONENTS}
    targets |= {t for t, _ in server.OPTIONAL.values()}
    for t in targets:
        module, _, fn = t.partition(":")
        last = module.rsplit(".", 1)[-1]
        assert fn == "serve" and (last == "service" or last.endswith("_service")), t
    for c in COMPONENTS:
        assert c.load() is not None, c.target


def test_credentials_take_a_kubeconfig_or_a_server():
    from nodeagent.client.config import Credentials

    with pytest.raises(ValueError, match="a kubeconfig or a server URL"):
        Credentials()
    with pytest.raises(ValueError, match="not both"):
        Credentials(kubeconfig="k", server="https://x")


def test_allowed_unsafe_sysctls_reach_the_kubelet(tmp_path):
    cfg = _up(tmp_path, "--allowed-unsafe-sysctls", "net.core.somaxconn, kernel.msg*")
    assert cfg.kubelet.allowed_unsafe_sysctls == ("net.core.somaxconn", "kernel.msg*")
