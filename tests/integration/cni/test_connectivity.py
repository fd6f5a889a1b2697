"""Real traffic through what the plugins built: pod↔pod, gateway, masquerade, hostPort, hairpin."""

from __future__ import annotations

import pytest

from tests.integration.cni import netutil
from tests.integration.cni.conftest import netns_path, ping

pytestmark = pytest.mark.root


def pod_ip(result: dict) -> str:
    return result["ips"][0]["address"].split("/")[0]


def test_two_pods_reach_each_other_and_the_gateway(any_runtime, net, res):
    runtime = any_runtime
    a, b = res.netns(), res.netns()
    ra = runtime.call("nodeagent-bridge", "ADD", net.conf(), cid="pa", netns=netns_path(a))
    rb = runtime.call("nodeagent-bridge", "ADD", net.conf(), cid="pb", netns=netns_path(b))
    assert ping(a, pod_ip(rb)) and ping(b, pod_ip(ra))
    assert ping(a, net.gateway)
    runtime.call("nodeagent-bridge", "DEL", net.conf(), cid="pa", netns=netns_path(a))
    assert not ping(b, pod_ip(ra))
    runtime.call("nodeagent-bridge", "DEL", net.conf(), cid="pb", netns=netns_path(b))
    net.assert_clean()


def test_masquerade_to_an_outside_address(runtime, net, res, outside):
    ext, host_addr, ext_addr = outside
    pod = res.netns()
    runtime.call("nodeagent-bridge", "ADD", net.conf(), cid="pm", netns=netns_path(pod))
    port = netutil.free_port()
    srv = netutil.serve(ext, port, 1)
    try:
        # ext has no route back to the pod subnet: only a masqueraded connection can succeed
        assert netutil.connect(pod, ext_addr, port) == f"hello {host_addr}"
    finally:
        netutil.stop(srv)
    runtime.call("nodeagent-bridge", "DEL", net.conf(), cid="pm", netns=netns_path(pod))
    net.assert_clean()


def test_host_port_from_host_localhost_other_netns_and_hairpin(any_runtime, net, res, outside):
    runtime = any_runtime
    ext, host_addr, ext_addr = outside
    pod = res.netns()
    hp = netutil.free_port()
    conflist = net.conflist({"type": "nodeagent-portmap", "capabilities": {"portMappings": True}})
    rc = {"portMappings": [{"hostPort": hp, "containerPort": 8080, "protocol": "tcp"}]}
    result = runtime.add_list(conflist, "hp1", netns_path(pod), runtime_config=rc)
    ip = pod_ip(result)
    srv = netutil.serve(pod, 8080, 4)
    try:
        assert netutil.connect(None, host_addr, hp).startswith("hello ")       # host → its own address
        assert netutil.connect(None, "127.0.0.1", hp).startswith("hello ")     # host → localhost
        assert netutil.connect(ext, host_addr, hp) == f"hello {ext_addr}"      # another netns, source kept
        assert netutil.connect(pod, host_addr, hp) == f"hello {net.gateway}"   # hairpin: masqueraded
    finally:
        netutil.stop(srv)
    runtime.check_list(conflist, "hp1", netns_path(pod), result, runtime_config=rc)
    assert any(f"{ip}:8080" in r for r in net.rules())
    runtime.del_list(conflist, "hp1", netns_path(pod), prev=result, runtime_config=rc)
    net.assert_clean()
    assert netutil.connect(None, "127.0.0.1", hp) == ""
