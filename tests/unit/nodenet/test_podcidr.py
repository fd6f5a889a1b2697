"""Adopting the Node's spec.podCIDR: the CNI config follows it, `up` instances get their own IPAM range,
--pod-subnet overrides, and --node-ip reaches the kubelet, nodenet and netproxy."""

from __future__ import annotations

import argparse
import json

import pytest

from nodeagent.commands import agent
from nodeagent.commands.agent import config_from_args
from nodeagent.commands.up import up_controller_options
from nodeagent.controllers.nodeipam import CidrSet
from nodeagent.layout import Layout
from nodeagent.nodenet import annotations as ann
from nodeagent.nodenet import plan as P
from nodeagent.nodenet.network import PodNetwork
from nodeagent.nodenet.podcidr import PodCIDRFollower, node_pod_cidr


def _network(args: argparse.Namespace) -> PodNetwork:
    cni = config_from_args(args).cni
    assert cni is not None  # an agent runs the pod network
    return cni.network


def _agent_args(data_dir, **kw):
    p = argparse.ArgumentParser()
    agent.add_arguments(p)
    a = p.parse_args(["--data-dir", data_dir, "--node-name", "n1", "--server", "https://10.0.0.1:6443",
                      "--token", "t"])
    a.token = None
    for k, v in kw.items():
        setattr(a, k, v)
    return a


def test_node_pod_cidr_reads_spec_then_podcidrs_and_ignores_garbage():
    assert node_pod_cidr(None) is None
    assert node_pod_cidr({"spec": {}}) is None
    assert node_pod_cidr({"spec": {"podCIDR": "10.244.3.0/24"}}) == "10.244.3.0/24"
    assert node_pod_cidr({"spec": {"podCIDRs": ["10.244.4.0/24", "fd00::/64"]}}) == "10.244.4.0/24"
    assert node_pod_cidr({"spec": {"podCIDR": "not-a-cidr"}}) is None


def test_without_pod_subnet_the_subnet_is_adopted_and_no_conflist_can_be_written_yet(tmp_path):
    net = _network(_agent_args(str(tmp_path)))
    assert net.subnet is None
    with pytest.raises(ValueError, match="spec.podCIDR"):
        net.conflist()


def test_pod_subnet_overrides(tmp_path):
    cfg = config_from_args(_agent_args(str(tmp_path), pod_subnet="10.9.8.0/24"))
    assert cfg.cni and cfg.cni.network.subnet == "10.9.8.0/24"
    assert cfg.controllers is None  # an agent runs no node IPAM


async def test_follower_writes_the_conflist_when_the_podcidr_appears_and_again_when_it_changes(tmp_path):
    net = _network(_agent_args(str(tmp_path)))
    f = PodCIDRFollower(net, "n1")
    conf = tmp_path / "cni" / "net.d" / "10-nodeagent.conflist"
    assert await f.on_node({"metadata": {"name": "n1"}, "spec": {}}) is None
    assert not conf.exists()  # registered, no podCIDR yet: nothing written
    adopted = await f.on_node({"metadata": {"name": "n1"}, "spec": {"podCIDR": "10.244.5.0/24"}})
    assert adopted == "10.244.5.0/24"
    plugin = json.loads(conf.read_text())["plugins"][0]
    assert plugin["ipam"]["ranges"] == [[{"subnet": "10.244.5.0/24"}]] and plugin["bridge"] == net.bridge
    before = conf.stat().st_mtime_ns
    await f.on_node({"metadata": {"name": "n1"}, "spec": {"podCIDR": "10.244.5.0/24"}})
    assert conf.stat().st_mtime_ns == before  # same podCIDR: not rewritten
    await f.on_node(None)  # the Node deleted: keep what we have
    assert f.subnet == "10.244.5.0/24"
    await f.on_node({"metadata": {"name": "n1"}, "spec": {"podCIDR": "10.244.9.0/24"}})
    assert json.loads(conf.read_text())["plugins"][0]["ipam"]["ranges"] == [[{"subnet": "10.244.9.0/24"}]]


def test_forget_config_removes_only_ours(tmp_path):
    net = _network(_agent_args(str(tmp_path), pod_subnet="10.9.8.0/24"))
    net.write()
    other = tmp_path / "cni" / "net.d" / "99-other.conflist"
    other.write_text("{}")
    assert net.forget_config() is True and net.forget_config() is False
    assert other.exists()


def test_up_instances_get_their_own_ipam_range_and_its_first_subnet_is_the_node_s(tmp_path):
    assert Layout.for_data_dir("/var/lib/nodeagent").cluster_cidr == "10.244.0.0/16"
    opts = up_controller_options(str(tmp_path), None, None)
    assert opts.cluster_cidr == Layout.for_data_dir(str(tmp_path)).cluster_cidr
    assert opts.node_cidr_mask_size == 24
    assert CidrSet(opts.cluster_cidr, opts.node_cidr_mask_size).allocate() == opts.cluster_cidr
    # --pod-subnet on `up`: its IPAM hands out exactly that subnet, so spec.podCIDR is what the bridge uses
    opts = up_controller_options(str(tmp_path), None, "10.50.0.0/25")
    assert CidrSet(opts.cluster_cidr, opts.node_cidr_mask_size).allocate() == "10.50.0.0/25"
    # --cluster-cidr widens it (several nodes joining an `up`)
    opts = up_controller_options(str(tmp_path), "10.60.0.0/16", None)
    assert (opts.cluster_cidr, opts.node_cidr_mask_size) == ("10.60.0.0/16", 24)
    with pytest.raises(SystemExit, match="cluster-cidr"):
        up_controller_options(str(tmp_path), "10.60.0.0/33", None)


def test_node_ip_reaches_the_kubelet_nodenet_and_netproxy(tmp_path):
    from netproxy.service import node_config

    cfg = config_from_args(_agent_args(str(tmp_path), node_ip="192.168.56.11"))
    assert cfg.kubelet and cfg.nodenet and cfg.netproxy  # an agent runs them all
    assert cfg.kubelet.node_ip == "192.168.56.11"
    assert cfg.nodenet.node_ip == "192.168.56.11"  # nodenet's underlay address (nodenet_service.serve)
    assert node_config(cfg.netproxy).node_ips == ("192.168.56.11",)  # NodePorts answer there
    plain = config_from_args(_agent_args(str(tmp_path)))
    assert plain.kubelet and plain.netproxy
    assert plain.kubelet.node_ip == "" and node_config(plain.netproxy).node_ips == ()
    with pytest.raises(SystemExit, match="--node-ip"):
        config_from_args(_agent_args(str(tmp_path), node_ip="eth1"))


def test_node_agent_reports_node_ip_as_internal_ip(tmp_path):
    from nodeagent.kubelet.node import NodeAgent

    n = NodeAgent(None, None,  # type: ignore[arg-type]  # neither the API client nor the runtime is reached
                  "n1", str(tmp_path), lambda: (True, ""), addresses=["192.168.56.11"])
    assert n.addresses == ["192.168.56.11"]
    detected = NodeAgent(None, None,  # type: ignore[arg-type]  # neither the API client nor the runtime is reached
                         "n1", str(tmp_path), lambda: (True, ""))
    assert detected.addresses  # detected


def test_the_pod_subnet_annotation_is_published_only_for_an_override():
    # adopted: the others route to spec.podCIDR, no annotation (a stale one is removed)
    a = P.my_annotations("host-gw", "10.0.0.1", "10.244.1.0/24", None, "10.244.1.0/24")
    assert a[ann.POD_CIDR] is None
    # --pod-subnet differing from spec.podCIDR: announced, and it wins over spec.podCIDR for the peers
    a = P.my_annotations("host-gw", "10.0.0.1", "10.9.8.0/24", None, "10.244.1.0/24")
    assert a[ann.POD_CIDR] == "10.9.8.0/24"
    me = {"metadata": {"name": "n1", "annotations": {ann.PUBLIC_IP: "10.0.0.1"}},
          "spec": {"podCIDR": "10.244.1.0/24"}}
    other = {"metadata": {"name": "n2",
                          "annotations": {ann.PUBLIC_IP: "10.0.0.2", ann.POD_CIDR: "10.9.8.0/24"}},
             "spec": {"podCIDR": "10.244.2.0/24"}}
    third = {"metadata": {"name": "n3", "annotations": {ann.PUBLIC_IP: "10.0.0.3"}},
             "spec": {"podCIDRs": ["10.244.3.0/24"]}}
    assert P.desired("host-gw", "n1", [me, other, third]).routes == {
        P.Route("10.9.8.0/24", "10.0.0.2", None), P.Route("10.244.3.0/24", "10.0.0.3", None)}


async def test_the_kubelet_hands_the_node_s_podcidr_to_the_runtime_once(tmp_path):
    from cri.client import RuntimeClient
    from nodeagent.kubelet.node import NodeAgent

    class Runtime(RuntimeClient):
        def __init__(self):  # no channel: only the podCIDR hand-off is reached
            self.cidrs = []

        async def update_runtime_config(self, cidr):
            self.cidrs.append(cidr)

    rt = Runtime()
    n = NodeAgent(None, rt,  # type: ignore[arg-type]  # the API client is not reached
                  "n1", str(tmp_path), lambda: (True, ""), addresses=["10.0.0.1"])
    await n._update_pod_cidr({"spec": {}})  # not assigned yet
    await n._update_pod_cidr({"spec": {"podCIDR": "10.244.3.0/24"}})
    await n._update_pod_cidr({"spec": {"podCIDR": "10.244.3.0/24"}})
    assert rt.cidrs == ["10.244.3.0/24"] and n.pod_cidr == "10.244.3.0/24"
