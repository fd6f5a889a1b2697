"""Where one instance keeps things: the default data dir keeps the well-known names, any other one gets
names of its own (tagged, or under the data dir), so instances never share a socket, bridge, chain or
cgroup."""

from __future__ import annotations

import dataclasses
import os

import pytest

from nodeagent.layout import DEFAULT_DATA_DIR, Layout, instance_tag


def test_the_default_data_dir_keeps_the_well_known_locations():
    d = Layout.default()
    assert d == Layout.for_data_dir("/var/lib/nodeagent") == Layout.for_data_dir()
    assert (d.data_dir, d.tag, d.is_default, d.throwaway) == (DEFAULT_DATA_DIR, "", True, False)
    assert d.cri_socket == "/run/nodeagent/cri.sock"
    assert d.cri_state_dir == "/var/lib/nodeagent/cri" and d.image_dir == "/var/lib/nodeagent/images"
    assert (d.cni_conf_dir, d.cni_ipam_dir) == ("/etc/cni/net.d", "/var/lib/cni/networks")
    assert d.cni_socket == "/run/nodeagent/cni.sock"
    assert (d.network_name, d.bridge, d.cluster_cidr) == ("nodeagent", "na0", "10.244.0.0/16")
    assert (d.apiserver_port, d.kubelet_port) == (6443, 10250)
    assert d.cgroup_root == ""  # kubepods under the hierarchy's root
    assert d.admin_kubeconfig == "/var/lib/nodeagent/admin.kubeconfig"
    assert d.admin_kubeconfig_copy == "/etc/nodeagent/admin.kubeconfig"
    assert d.node_kubeconfig == "/var/lib/nodeagent/kubelet.kubeconfig"
    assert (d.kubelet_root_dir, d.pod_log_dir, d.manifests_dir) == (
        "/var/lib/nodeagent/kubelet", "/var/lib/nodeagent/pod-logs", "/var/lib/nodeagent/manifests")
    assert (d.netpol_chain_prefix, d.netpol_set_prefix, d.netpol_table) == (
        "NODEAGENT-NP", "NA-NP-", "nodeagent-netpol")


def test_the_default_names_are_the_ones_the_standalone_tools_use_on_their_own():
    """The CNI plugins' compiled-in daemon socket and netpol's backends' defaults (what `nodeagent netpol`
    and the plugins use without a config) are the default instance's."""
    import inspect

    from cni.client import DEFAULT_SOCKET
    from netpol.iptables import IptablesBackend
    from netpol.nftables import NftablesBackend

    d = Layout.default()
    assert d.cni_socket == DEFAULT_SOCKET
    ipt = inspect.signature(IptablesBackend).parameters
    assert (ipt["chain_prefix"].default, ipt["set_prefix"].default) == (
        d.netpol_chain_prefix, d.netpol_set_prefix)
    assert inspect.signature(NftablesBackend).parameters["table"].default == d.netpol_table


def test_a_path_naming_the_default_data_dir_differently_is_the_default():
    assert Layout.for_data_dir("/var/lib/nodeagent/").is_default
    assert Layout.for_data_dir("/var/lib/../lib/nodeagent").is_default


def test_other_data_dirs_get_tagged_names_and_paths_of_their_own(tmp_path):
    d = str(tmp_path / "a")
    lay = Layout.for_data_dir(d)
    tag = instance_tag(d)
    assert len(tag) == 6 and lay.tag == tag and not lay.is_default and lay.throwaway
    assert (lay.bridge, lay.network_name, lay.cgroup_root) == (
        f"na{tag}", f"nodeagent-{tag}", f"nodeagent-{tag}")
    assert len(lay.bridge) <= 15  # a link name
    assert (lay.apiserver_port, lay.kubelet_port) == (0, 0)  # any free port
    assert lay.cluster_cidr == f"10.240.{int(tag[:2], 16)}.0/24"
    assert (lay.netpol_chain_prefix, lay.netpol_set_prefix, lay.netpol_table) == (
        f"NA{tag}-NP", f"NA{tag}-", f"nodeagent-netpol-{tag}")
    assert lay.admin_kubeconfig_copy is None
    paths = [v for f in dataclasses.fields(lay) if f.name != "data_dir"
             for v in [getattr(lay, f.name)] if isinstance(v, str) and v.startswith("/")]
    assert paths and all(p.startswith(d + "/") for p in paths), paths
    assert lay.cri_socket == f"{d}/cri.sock" and lay.cni_conf_dir == f"{d}/cni/net.d"
    assert lay.cni_ipam_dir == f"{d}/cni/networks" and lay.cni_socket == f"{d}/cni-plugin.sock"


def test_two_data_dirs_share_no_name():
    # fixed paths: the cluster CIDR's third octet is one of 256 values of the tag, so two random paths
    # share it now and then (instances on one host then pass --cluster-cidr)
    a, b = Layout.for_data_dir("/srv/nodeagent-a"), Layout.for_data_dir("/srv/nodeagent-b")
    for f in dataclasses.fields(Layout):
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if isinstance(va, str) and va:
            assert va != vb, f.name
    default = Layout.default()
    for name in ("cri_socket", "cni_conf_dir", "cni_ipam_dir", "cni_socket", "bridge", "network_name",
                 "cgroup_root", "netpol_chain_prefix", "netpol_table", "cluster_cidr"):
        assert getattr(a, name) != getattr(default, name), name


def test_the_tag_is_the_resolved_path_s(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    monkeypatch.chdir(tmp_path)
    assert instance_tag("real") == instance_tag(tmp_path / "real") == instance_tag(tmp_path / "link")
    assert Layout.for_data_dir("real").bridge == Layout.for_data_dir(tmp_path / "real").bridge


def test_a_layout_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Layout.default().bridge = "br0"  # type: ignore[misc]  # the write to a frozen field under test
