"""The speaker's Lease loop over in-memory API objects: one owner per address, the owner answers, a node
that stops being a candidate hands the address over at once, a gone address's Lease is deleted; and the
service controller handing a freed address to the Service waiting for one."""

from __future__ import annotations

import time
from typing import Any

from nodeagent.client.config import Credentials
from nodeagent.controllers.options import ControllerOptions
from nodeagent.controllers.servicelb_controller import ServiceLBController
from nodeagent.lbspeaker import election
from nodeagent.lbspeaker.config import SpeakerConfig
from nodeagent.lbspeaker.metrics import SpeakerMetrics
from nodeagent.lbspeaker.service import Speaker
from nodeagent.testing.clock import FakeClock
from tests.unit.controllers.fakes import FakeClient, FakeInformers, FakeRecorder

IP = "192.0.2.10"


class FakeResponder:
    """What the speaker asks of the ARP responder, without a socket."""

    def __init__(self) -> None:
        self.owned: set[str] = set()
        self.metrics = SpeakerMetrics()

    def own(self, ip: str) -> None:
        self.owned.add(ip)

    def disown(self, ip: str) -> None:
        self.owned.discard(ip)


def lb(name: str, ip: str | None, local: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.7", "selector": {"app": name},
                     "externalTrafficPolicy": "Local" if local else "Cluster", "ports": [{"port": 80}]},
            "status": {"loadBalancer": {"ingress": [{"ip": ip}]} if ip else {}}}


def slice_on(node: str) -> dict[str, Any]:
    return {"metadata": {"name": "web-1", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "endpoints": [{"addresses": ["10.244.1.5"], "nodeName": node, "conditions": {"ready": True}}]}


def speaker(node: str, inf: FakeInformers, client: FakeClient,
            clock: FakeClock | None = None) -> tuple[Speaker, FakeResponder, FakeRecorder]:
    r, rec = FakeResponder(), FakeRecorder()
    cfg = SpeakerConfig(Credentials(server="https://x", token="t"), node)
    return Speaker(client, cfg, r, rec, inf, clock or FakeClock()), r, rec  # type: ignore[arg-type]


def ready_nodes(inf: FakeInformers, *names: str) -> None:
    for n in names:
        inf.get("nodes").put({"metadata": {"name": n},
                              "status": {"conditions": [{"type": "Ready", "status": "True"}]}})


async def test_one_owner_then_handover_when_it_stops_being_a_candidate() -> None:
    inf = FakeInformers()
    client = FakeClient(inf)
    inf.get("services").put(lb("web", IP, local=True))
    inf.get("endpointslices").put(slice_on("a"))
    ready_nodes(inf, "a", "b")
    a, ra, reca = speaker("a", inf, client)
    b, rb, _ = speaker("b", inf, client)
    await a.tick()
    await b.tick()
    assert ra.owned == {IP} and rb.owned == set()  # b has no local endpoint: not even a candidate
    lease = inf.get("leases").get(f"nodeagent-lb-{IP}", "kube-system")
    assert lease["spec"]["holderIdentity"] == "a"
    assert reca.events == [("web", "nodeAssigned", 'announcing from node "a" with protocol "layer2"')]
    assert f'metallb_speaker_announced{{ip="{IP}",node="a",protocol="layer2",service="default/web"}} 1.0' \
        in ra.metrics.render().decode()
    # the endpoint moves to b: a gives the address up at once and b takes it at its next pass
    inf.get("endpointslices").put(slice_on("b"))
    await a.tick()
    assert ra.owned == set() and "metallb_speaker_announced{" not in ra.metrics.render().decode()
    await b.tick()
    assert rb.owned == {IP}
    assert inf.get("leases").get(f"nodeagent-lb-{IP}", "kube-system")["spec"]["holderIdentity"] == "b"
    # the Service goes: its owner stops answering and deletes the Lease
    inf.get("services").remove(lb("web", IP))
    await b.tick()
    assert rb.owned == set() and inf.get("leases").get(f"nodeagent-lb-{IP}", "kube-system") is None


async def test_the_ranked_first_takes_it_the_next_one_on_expiry_others_after_a_lease() -> None:
    inf = FakeInformers()
    client = FakeClient(inf)
    inf.get("services").put(lb("web", IP))
    ready_nodes(inf, "a", "b", "c")
    clock = FakeClock(time.time())
    first, second, third = election.ranking(IP, ["a", "b", "c"])
    sp = {n: speaker(n, inf, client, clock) for n in ("a", "b", "c")}
    for _ in range(2):  # the others may tick first: the address still goes to the first-ranked node
        for n in (third, second, first):
            await sp[n][0].tick()
    assert [n for n in sp if sp[n][1].owned] == [first]
    # the owner dies: its Lease expires; the next-ranked takes it at once, the third does not
    clock.advance(6)
    for n in (third, second):
        await sp[n][0].tick()
    assert sp[second][1].owned == {IP} and not sp[third][1].owned
    # a free address no ranked node takes is taken by anyone once it stayed free a whole lease
    lease = inf.get("leases").get(f"nodeagent-lb-{IP}", "kube-system")
    inf.get("leases").put({**lease, "spec": {**lease["spec"], "holderIdentity": None}})
    inf.get("nodes").remove({"metadata": {"name": first}})
    inf.get("nodes").remove({"metadata": {"name": second}})
    inf.get("nodes").remove({"metadata": {"name": third}})  # no Node known: no ranking at all
    sp[second][1].owned.clear()
    await sp[third][0].tick()
    assert not sp[third][1].owned
    clock.advance(5)
    await sp[third][0].tick()
    assert sp[third][1].owned == {IP}


async def test_controller_gives_a_freed_address_to_the_waiting_service() -> None:
    inf = FakeInformers()
    client = FakeClient(inf)
    rec = FakeRecorder()
    ctl = ServiceLBController(client, inf, rec, ControllerOptions(service_lb_pool=f"{IP}/32"))
    first, second = lb("first", None), lb("second", None)
    for s in (first, second):
        inf.get("services").put(s)
    await ctl.reconcile("default/first")
    await ctl.reconcile("default/second")
    assert inf.get("services").get("first", "default")["status"]["loadBalancer"]["ingress"] == [{"ip": IP}]
    assert ("second", "AllocationFailed", 'Failed to allocate IP for "default/second": no available IPs') \
        in rec.events
    inf.get("services").remove(inf.get("services").get("first", "default"))
    while len(ctl.queue):
        key = await ctl.queue.get()
        await ctl.reconcile(key)
        ctl.queue.done(key)
    assert inf.get("services").get("second", "default")["status"]["loadBalancer"]["ingress"] == [{"ip": IP}]
    assert ("second", "IPAllocated", f'Assigned IP ["{IP}"]') in rec.events
