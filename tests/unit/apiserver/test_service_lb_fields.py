"""The LoadBalancer fields as kube-apiserver treats them: healthCheckNodePort allocated for Local policy and
kept, allocateLoadBalancerNodePorts, the fields dropped on leaving LoadBalancer, bad values refused."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from nodeagent.api.resources import builtin
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.registry import Registry
from nodeagent.store.memory import MemoryStore

SVCS = builtin("", "v1", "services")


@pytest.fixture
async def reg():
    r = Registry(MemoryStore())
    await r.create(builtin("", "v1", "namespaces"), None, {"metadata": {"name": "d"}})
    yield r
    await r.close()


def lb(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"type": "LoadBalancer", "selector": {"app": name}, "ports": [{"port": 80}], **spec}}


async def test_local_policy_gets_a_health_check_node_port_kept_across_updates(reg) -> None:
    s = await reg.create(SVCS, "d", lb("a", externalTrafficPolicy="Local"))
    hc = s["spec"]["healthCheckNodePort"]
    assert 30000 <= hc <= 32767 and hc != s["spec"]["ports"][0]["nodePort"]
    assert s["spec"]["allocateLoadBalancerNodePorts"] is True
    new = copy.deepcopy(s)
    del new["spec"]["healthCheckNodePort"]
    new["spec"]["ports"][0]["port"] = 81
    u, _ = await reg.update(SVCS, "d", "a", new)
    assert u["spec"]["healthCheckNodePort"] == hc
    # the port is held: another Service cannot ask for it
    with pytest.raises(ApiError) as e:
        await reg.create(SVCS, "d", lb("b", externalTrafficPolicy="Local", healthCheckNodePort=hc))
    assert e.value.code == 422 and "spec.healthCheckNodePort" in e.value.message
    # Cluster policy: no health check port
    u["spec"]["externalTrafficPolicy"] = "Cluster"
    u["spec"].pop("healthCheckNodePort")
    c, _ = await reg.update(SVCS, "d", "a", u)
    assert "healthCheckNodePort" not in c["spec"]


async def test_no_node_ports_when_asked_and_fields_dropped_on_type_change(reg) -> None:
    s = await reg.create(SVCS, "d", lb("a", allocateLoadBalancerNodePorts=False, loadBalancerClass="x.io/y"))
    assert "nodePort" not in s["spec"]["ports"][0]
    s["spec"]["type"] = "ClusterIP"
    c, _ = await reg.update(SVCS, "d", "a", s)
    assert "allocateLoadBalancerNodePorts" not in c["spec"] and "loadBalancerClass" not in c["spec"]
    # as `kubectl apply` sends it: the server-set nodePort and policy carried over, dropped with the type
    b = await reg.create(SVCS, "d", lb("b", externalTrafficPolicy="Local"))
    assert b["spec"]["ports"][0]["nodePort"]
    b["spec"]["type"] = "ClusterIP"
    c, _ = await reg.update(SVCS, "d", "b", b)
    assert "nodePort" not in c["spec"]["ports"][0] and "healthCheckNodePort" not in c["spec"]
    assert "externalTrafficPolicy" not in c["spec"]


@pytest.mark.parametrize("spec,field", [
    ({"loadBalancerSourceRanges": ["10.0.0.0/33"]}, "spec.loadBalancerSourceRanges[0]"),
    ({"loadBalancerIP": "1.2.3"}, "spec.loadBalancerIP"),
    ({"healthCheckNodePort": 30100}, "spec.healthCheckNodePort"),
])
async def test_bad_values_refused_with_the_field(reg, spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ApiError) as e:
        await reg.create(SVCS, "d", lb("a", **spec))
    assert e.value.code == 422 and field in e.value.message


async def test_load_balancer_fields_forbidden_elsewhere_and_class_immutable(reg) -> None:
    with pytest.raises(ApiError) as e:
        await reg.create(SVCS, "d", {"metadata": {"name": "n"}, "spec": {
            "type": "NodePort", "ports": [{"port": 80}], "loadBalancerSourceRanges": ["10.0.0.0/8"]}})
    assert "may only be used when `type` is 'LoadBalancer'" in e.value.message
    s = await reg.create(SVCS, "d", lb("a", loadBalancerClass="x.io/y"))
    s["spec"]["loadBalancerClass"] = "x.io/z"
    with pytest.raises(ApiError) as e:
        await reg.update(SVCS, "d", "a", s)
    assert "spec.loadBalancerClass" in e.value.message and "may not change once set" in e.value.message


async def test_status_ip_mode_defaulted_to_vip_and_checked(reg) -> None:
    s = await reg.create(SVCS, "d", lb("a"))
    s["status"] = {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}
    u, _ = await reg.update(SVCS, "d", "a", s, subresource="status")
    assert u["status"]["loadBalancer"]["ingress"] == [{"ip": "192.0.2.10", "ipMode": "VIP"}]
    u["status"]["loadBalancer"]["ingress"] = [{"ip": "192.0.2.10", "ipMode": "Bogus"}]
    with pytest.raises(ApiError) as e:
        await reg.update(SVCS, "d", "a", u, subresource="status")
    assert 'status.loadBalancer.ingress[0].ipMode: Unsupported value: "Bogus"' in e.value.message
