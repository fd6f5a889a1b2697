"""Per-instance names and paths: several `nodeagent up` with different data dirs never collide."""

import argparse

from nodeagent.commands import up
from nodeagent.commands.up import config_from_args


def _args(data_dir, **kw):
    p = argparse.ArgumentParser()
    up.add_arguments(p)
    args = p.parse_args(["--data-dir", data_dir])
    for k, v in kw.items():
        setattr(args, k, v)
    return args


def test_default_data_dir_keeps_the_well_known_locations():
    cfg = config_from_args(_args("/var/lib/nodeagent"))
    assert cfg.cni and cfg.kubelet and cfg.controllers and cfg.apiserver  # `up` runs them all
    net = cfg.cni.network
    kc = cfg.kubelet
    assert (net.bridge, net.subnet, net.conf_dir, net.ipam_dir) == (
        "na0", None, "/etc/cni/net.d", "/var/lib/cni/networks")  # the subnet: the Node's spec.podCIDR
    # `up`'s own node IPAM hands its node the first /24 of 10.244.0.0/16: the well-known 10.244.0.0/24
    opts = cfg.controllers.options
    assert (opts.cluster_cidr, opts.node_cidr_mask_size) == ("10.244.0.0/16", 24)
    assert cfg.apiserver.port == 6443
    assert kc.runtime_endpoint == "/run/nodeagent/cri.sock" and kc.cgroup_root == ""


def test_two_data_dirs_share_nothing(tmp_path):
    a, b = (config_from_args(_args(str(tmp_path / n))) for n in ("a", "b"))
    assert a.cni and b.cni and a.kubelet and b.kubelet and a.apiserver and a.cri
    na, nb = a.cni.network, b.cni.network
    ka, kb = a.kubelet, b.kubelet
    for x, y in ((na.bridge, nb.bridge), (na.name, nb.name), (na.conf_dir, nb.conf_dir),
                 (na.ipam_dir, nb.ipam_dir), (ka.runtime_endpoint, kb.runtime_endpoint),
                 (ka.cgroup_root, kb.cgroup_root), (ka.root_dir, kb.root_dir), (ka.log_dir, kb.log_dir),
                 (ka.manifests_dir, kb.manifests_dir)):
        assert x != y
    # each instance's node IPAM range is its own /24 named by its data dir (as the bridge is), so the
    # podCIDRs of instances on this host do not collide
    from nodeagent.layout import instance_tag

    for cfg, d in ((a, "a"), (b, "b")):
        tag = instance_tag(str(tmp_path / d))
        assert cfg.controllers and cfg.controllers.options.cluster_cidr == f"10.240.{int(tag[:2], 16)}.0/24"
    assert a.apiserver.port == 0 and len(na.bridge) <= 15
    assert na.conf_dir.startswith(str(tmp_path / "a")) and a.cri.cni_conf_dir == na.conf_dir
    assert ka.runtime_endpoint == str(tmp_path / "a" / "cri.sock")


def test_flags_override_the_derived_names(tmp_path):
    cfg = config_from_args(_args(str(tmp_path), bridge="br-x", pod_subnet="10.9.8.0/24", cgroup_root="mine",
                                 node_name="Node-A", port=7000))
    assert cfg.cni and cfg.kubelet and cfg.apiserver
    net = cfg.cni.network
    kc = cfg.kubelet
    assert (net.bridge, net.subnet, kc.cgroup_root, kc.node_name, cfg.apiserver.port) == (
        "br-x", "10.9.8.0/24", "mine", "node-a", 7000)
    conf = net.conflist()
    assert conf["name"] == net.name
    plugin = conf["plugins"][0]
    assert plugin["bridge"] == "br-x" and plugin["ipam"]["dataDir"] == net.ipam_dir
    assert plugin["ipam"]["ranges"] == [[{"subnet": "10.9.8.0/24"}]]


def test_each_instance_has_its_own_cni_daemon_socket_and_the_runtime_hands_it_to_the_plugins(tmp_path):
    default = config_from_args(_args("/var/lib/nodeagent"))
    # the plugins' default
    assert default.cni and default.cni.network.daemon_socket == "/run/nodeagent/cni.sock"
    a, b = (config_from_args(_args(str(tmp_path / n))) for n in ("a", "b"))
    assert a.cni and b.cni and a.cri and b.cri
    sa, sb = a.cni.network.daemon_socket, b.cni.network.daemon_socket
    assert sa != sb and sa.startswith(str(tmp_path / "a"))
    assert a.cri.cni_socket == sa and b.cri.cni_socket == sb


def test_cni_bin_dirs_flag_reaches_the_runtime(tmp_path):
    from cri.config import CRIConfig

    cri = config_from_args(_args(str(tmp_path))).cri
    assert cri and cri.cni_bin_dirs == CRIConfig.cni_bin_dirs
    cri = config_from_args(_args(str(tmp_path), cni_bin_dir=["/x/bin", "/usr/lib/cni"])).cri
    assert cri and cri.cni_bin_dirs == ("/x/bin", "/usr/lib/cni")


def test_proxy_flags_reach_netproxy(tmp_path):
    import pytest

    from netproxy.service import proxier_options

    p = argparse.ArgumentParser()
    up.add_arguments(p)
    args = p.parse_args(["--data-dir", str(tmp_path), "--proxy-mode", "nftables"])
    cfg = config_from_args(args).netproxy
    assert cfg and (cfg.mode, cfg.rule_counters) == ("nftables", False)
    assert proxier_options(cfg) == {}
    cfg = config_from_args(p.parse_args(["--data-dir", str(tmp_path), "--proxy-rule-counters"])).netproxy
    assert cfg and cfg.mode == "iptables" and proxier_options(cfg) == {"counters": "true"}
    cfg = config_from_args(p.parse_args(["--data-dir", str(tmp_path), "--proxy-mode", "ipvs",
                                         "--ipvs-strict-arp"])).netproxy
    assert cfg and proxier_options(cfg) == {"scheduler": "rr", "strict_arp": "true"}
    with pytest.raises(SystemExit):
        p.parse_args(["--proxy-mode", "userspace"])


def test_agent_snapshot_kubeconfig_is_the_snapshotters_credential(tmp_path):
    """`agent --snapshot-kubeconfig`: the CSI snapshotter's own account (a node's may not serve snapshots);
    without it the kubelet's; a missing file ends the command with its name."""
    import pytest

    from nodeagent.commands import agent

    p = argparse.ArgumentParser()
    agent.add_arguments(p)
    base = ["--data-dir", str(tmp_path), "--server", "https://10.0.0.1:6443", "--token", "t"]
    cfg = agent.config_from_args(p.parse_args(base))
    assert cfg.kubelet and cfg.kubelet.snapshot_credentials is None
    kc = tmp_path / "snap.kubeconfig"
    kc.write_text("apiVersion: v1\nkind: Config\n")
    cfg = agent.config_from_args(p.parse_args([*base, "--snapshot-kubeconfig", str(kc)]))
    assert cfg.kubelet and cfg.kubelet.snapshot_credentials is not None
    assert cfg.kubelet.snapshot_credentials.kubeconfig == str(kc)
    with pytest.raises(SystemExit) as e:
        agent.config_from_args(p.parse_args([*base, "--snapshot-kubeconfig", str(tmp_path / "nope")]))
    assert f"--snapshot-kubeconfig {tmp_path / 'nope'}: no such file" in str(e.value)
