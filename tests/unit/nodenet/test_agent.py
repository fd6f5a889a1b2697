"""The agent's reconcile step with a fake API client and a fake dataplane: waits for the server's stamp,
publishes itself (again if its Node is re-created), converges entries, switches modes."""

from __future__ import annotations

import weakref

import pytest

from nodeagent.client import informer
from nodeagent.client.rest import Client
from nodeagent.nodenet import agent as A
from nodeagent.nodenet import annotations as ann
from nodeagent.nodenet import plan as P


class FakeClient(Client):
    """Records patches (Client's constructor is not run: no connection)."""

    server = "https://10.0.0.1:6443"
    identity = ("fake", None, None, False)

    def __init__(self):
        self.patches = []

    async def patch(self, resource, name, patch, *args, **kw):
        self.patches.append((resource, name, patch))
        return {}


class FakeDataplane:
    made: list = []

    def __init__(self, mode, public_ip, pod_cidr):
        self.mode, self.public_ip, self.pod_cidr = mode, public_ip, pod_cidr
        self.vtep_mac = None
        self.have = P.Plan(mode, frozenset())
        self.torn = False
        FakeDataplane.made.append(self)

    def setup(self):
        self.vtep_mac = "02:aa:00:00:00:01" if self.mode == "vxlan" else None

    def current(self):
        return self.have

    def apply(self, changes):
        routes = (set(self.have.routes) - set(changes.del_routes)) | set(changes.add_routes)
        fdb = (set(self.have.fdb) - set(changes.del_fdb)) | set(changes.add_fdb)
        neigh = (set(self.have.neigh) - set(changes.del_neigh)) | set(changes.add_neigh)
        self.have = P.Plan(self.mode, frozenset(routes), frozenset(fdb), frozenset(neigh))

    def teardown(self):
        self.torn = True


class NodeNet(A.NodeNet):
    masq_calls: list[tuple[str, str, str]]  # the masquerade rules ensured and removed, in order


@pytest.fixture
def net(monkeypatch):
    # the agent reads the process's informer of nodes (never run here): each test its own
    monkeypatch.setattr(informer, "_SHARED", weakref.WeakValueDictionary())
    FakeDataplane.made = []
    monkeypatch.setattr(A, "Dataplane", FakeDataplane)
    calls = []
    monkeypatch.setattr(A.masq, "ensure", lambda cidr, node: calls.append(("ensure", cidr, node)))
    monkeypatch.setattr(A.masq, "remove", lambda cidr, node: calls.append(("remove", cidr, node)))
    n = NodeNet(FakeClient(), "n1", "10.244.1.0/24", "10.0.0.11")
    n.masq_calls = calls
    return n


def put(net, name, **a):
    net.nodes.cache[name] = {"metadata": {"name": name, "annotations": dict(a)}}


async def test_nothing_happens_until_the_server_stamps_our_node(net):
    put(net, "n1")
    await net.step()
    assert not FakeDataplane.made and not net.client.patches


async def test_publishes_itself_and_routes_to_published_peers(net):
    stamp = {ann.BACKEND: "host-gw", ann.CLUSTER_CIDR: "10.244.0.0/16"}
    put(net, "n1", **stamp)
    put(net, "n2", **stamp, **{ann.PUBLIC_IP: "10.0.0.12", ann.POD_CIDR: "10.244.2.0/24"})
    await net.step()
    (_, name, body), = net.client.patches
    assert name == "n1" and body["metadata"]["annotations"][ann.PUBLIC_IP] == "10.0.0.11"
    assert net.masq_calls == [("ensure", "10.244.0.0/16", "n1")]
    assert FakeDataplane.made[0].have.routes == {P.Route("10.244.2.0/24", "10.0.0.12", None)}

    # our annotations now in the cache: no second patch; n2 leaves: its route goes
    put(net, "n1", **stamp, **{k: v for k, v in body["metadata"]["annotations"].items() if v is not None})
    del net.nodes.cache["n2"]
    await net.step()
    assert len(net.client.patches) == 1
    assert FakeDataplane.made[0].have.routes == frozenset()

    # our Node re-created without our annotations: published again
    put(net, "n1", **stamp)
    await net.step()
    assert len(net.client.patches) == 2


async def test_mode_change_rebuilds_the_dataplane_and_publishes_the_vtep(net):
    put(net, "n1", **{ann.BACKEND: "host-gw", ann.CLUSTER_CIDR: "10.244.0.0/16"})
    await net.step()
    put(net, "n1", **{ann.BACKEND: "vxlan", ann.CLUSTER_CIDR: "10.244.0.0/16"})
    await net.step()
    assert [d.mode for d in FakeDataplane.made] == ["host-gw", "vxlan"] and FakeDataplane.made[0].torn
    assert net.client.patches[-1][2]["metadata"]["annotations"][ann.VTEP_MAC] == "02:aa:00:00:00:01"


async def test_unknown_mode_is_ignored(net):
    put(net, "n1", **{ann.BACKEND: "gre"})
    await net.step()
    assert not FakeDataplane.made


async def test_without_an_override_it_waits_for_spec_podcidr_and_follows_it(monkeypatch):
    FakeDataplane.made = []
    monkeypatch.setattr(A, "Dataplane", FakeDataplane)
    monkeypatch.setattr(A.masq, "ensure", lambda cidr, node: None)
    client = FakeClient()
    n = A.NodeNet(client, "n1", None, "10.0.0.11")
    stamp = {ann.BACKEND: "vxlan", ann.CLUSTER_CIDR: "10.244.0.0/16"}
    put(n, "n1", **stamp)
    await n.step()
    assert not FakeDataplane.made and not client.patches  # registered, no podCIDR yet: nothing built
    n.nodes.cache["n1"]["spec"] = {"podCIDR": "10.244.3.0/24"}
    await n.step()
    assert FakeDataplane.made[-1].pod_cidr == "10.244.3.0/24"  # the VTEP address comes from it
    published = client.patches[-1][2]["metadata"]["annotations"]
    assert published[ann.POD_CIDR] is None and published[ann.PUBLIC_IP] == "10.0.0.11"  # spec.podCIDR says it
    n.nodes.cache["n1"]["spec"] = {"podCIDR": "10.244.4.0/24"}  # re-assigned (the Node was re-created)
    await n.step()
    assert FakeDataplane.made[0].torn and FakeDataplane.made[-1].pod_cidr == "10.244.4.0/24"
