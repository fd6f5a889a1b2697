"""The one status.loadBalancer writer: sorted addresses, names as hostnames, and no write when only fields the
apiserver adds (a Service's ipMode) differ, so a controller's own update never loops back into a write."""

from __future__ import annotations

from typing import Any

from nodeagent.client.loadbalancer import load_balancer_ingress, set_load_balancer_status
from tests.unit.controllers.fakes import FakeClient, FakeInformers


def test_shape() -> None:
    assert load_balancer_ingress(["b.example", "192.0.2.2", "192.0.2.1", "192.0.2.1"]) == [
        {"ip": "192.0.2.1"}, {"ip": "192.0.2.2"}, {"hostname": "b.example"}]


async def test_unchanged_addresses_cost_no_write() -> None:
    inf = FakeInformers()
    client = FakeClient(inf)
    svc: dict[str, Any] = {"metadata": {"name": "web", "namespace": "default"},
                           "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1", "ipMode": "VIP"}]}}}
    inf.get("services").put(svc)
    assert not await set_load_balancer_status(client, "services", svc, ["192.0.2.1"])  # type: ignore[arg-type]
    assert await set_load_balancer_status(client, "services", svc, ["192.0.2.2"])  # type: ignore[arg-type]
    assert inf.get("services").get("web", "default")["status"]["loadBalancer"]["ingress"] == [
        {"ip": "192.0.2.2"}]
