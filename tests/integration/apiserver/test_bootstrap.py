"""Bootstrap: system namespaces, the `kubernetes` Service on the range's first IP, repaired when deleted;
NodePort allocation with conflicts rejected."""

from __future__ import annotations

import asyncio

import pytest

from nodeagent.apiserver.config import ApiServerConfig
from nodeagent.apiserver.server import ApiServer
from nodeagent.client import Client, ClientError


@pytest.fixture
async def live(tmp_path):
    srv = ApiServer(ApiServerConfig(data_dir=str(tmp_path), bind_address="127.0.0.1", port=0,
                                    datastore="sqlite",
                                    service_cluster_ip_range="10.100.0.0/16", lease_duration=3))
    await srv.start()
    c = Client.from_kubeconfig(srv.kubeconfig_path)
    try:
        yield srv, c
    finally:
        await c.close()
        await srv.stop()


async def test_kubernetes_service_and_repair(live):
    srv, c = live
    names = {n["metadata"]["name"] for n in (await c.list("namespaces"))["items"]}
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= names
    svc = await c.get("services", "kubernetes", "default")
    assert svc["spec"]["clusterIP"] == "10.100.0.1"
    ca = (srv.data_dir / "pki" / "ca.crt").read_text()
    assert (await c.get("configmaps", "kube-root-ca.crt", "kube-system"))["data"]["ca.crt"] == ca
    ep = await c.get("endpoints", "kubernetes", "default")
    assert ep["subsets"][0]["ports"][0]["port"] == srv.port
    await c.delete("services", "kubernetes", "default")
    await c.delete("endpoints", "kubernetes", "default")
    for _ in range(100):
        try:
            svc = await c.get("services", "kubernetes", "default")
            await c.get("endpoints", "kubernetes", "default")
            break
        except ClientError:
            await asyncio.sleep(0.1)
    assert svc["spec"]["clusterIP"] == "10.100.0.1"


def _node_port(name: str, port: int) -> dict:
    return {"metadata": {"name": name},
            "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": port}]}}


async def test_node_ports_and_cluster_ips(live):
    _, c = live
    a = await c.create("services", _node_port("a", 30080), "default")
    assert a["spec"]["clusterIP"].startswith("10.100.") and a["spec"]["ports"][0]["nodePort"] == 30080
    with pytest.raises(ClientError) as e:
        await c.create("services", _node_port("b", 30080), "default")
    assert e.value.code == 422 and "provided port is already allocated" in e.value.message
    with pytest.raises(ClientError) as e:
        await c.create("services", {"metadata": {"name": "c"}, "spec": {"clusterIP": a["spec"]["clusterIP"],
                                                                       "ports": [{"port": 80}]}}, "default")
    assert e.value.code == 422 and "already allocated" in e.value.message
    with pytest.raises(ClientError) as e:
        await c.create("services", _node_port("d", 80), "default")
    assert e.value.code == 422 and "not in the valid range" in e.value.message
    await c.delete("services", "a", "default")
    b = await c.create("services", _node_port("b", 30080), "default")
    assert b["spec"]["ports"][0]["nodePort"] == 30080
    names = [s["metadata"]["name"] for s in (await c.list("services", "default"))["items"]]
    assert sorted(names) == ["b", "kubernetes"]


async def test_old_events_expire(live):
    srv, c = live
    from nodeagent.apiserver.bootstrap import Bootstrap

    for name, ts in (("old", "2020-01-01T00:00:00Z"), ("new", None)):
        ev = {"metadata": {"name": name},
              "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"},
              "reason": "Test", "message": "m", "type": "Normal"}
        if ts:
            ev["lastTimestamp"] = ts
        await c.create("events", ev, "default")
    # (the server's own loop may be first)
    await Bootstrap(srv.registry, "127.0.0.1", srv.port).expire_events()
    assert [e["metadata"]["name"] for e in (await c.list("events", "default"))["items"]] == ["new"]


async def test_quota_status_follows_deletions(live):
    _, c = live
    await c.create("resourcequotas",
                   {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "5", "configmaps": "9"}}},
                   "default")
    for i in range(2):
        await c.create("pods", {"metadata": {"name": f"p{i}"},
                                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}, "default")
    await c.delete("pods", "p0", "default")
    await c.create("configmaps", {"metadata": {"name": "cm"}}, "default")
    n_cms = str(len((await c.list("configmaps", "default"))["items"]))  # with kube-root-ca.crt
    for _ in range(100):
        st = (await c.get("resourcequotas", "q", "default")).get("status") or {}
        if st.get("used", {}).get("pods") == "1" and st["used"].get("configmaps") == n_cms:
            break
        await asyncio.sleep(0.1)
    assert st["used"]["pods"] == "1" and st["hard"] == {"pods": "5", "configmaps": "9"}
    assert st["used"]["configmaps"] == n_cms
