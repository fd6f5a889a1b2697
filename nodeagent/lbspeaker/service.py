"""`serve(config, ready)`: the L2 speaker, a node component of `up` / `agent`.

Every `retry_period` it looks at the LoadBalancer addresses the service controller wrote
(`api.service_lb`: allocation and announcement meet only through the Services) and, for each address this
node may announce (`election.eligible`), takes or renews the address's Lease (`nodeagent-lb-<ip>` in
kube-system, client-go's leader-election rules through `LeaderElector`). The holder answers ARP for the
address (`responder.Responder`) and sends gratuitous ARP when it takes over, so a killed owner's address
moves within the lease duration. A node that stops being a candidate (no local endpoint under Local
policy) releases the Lease at once, and an owner that cannot renew stops answering before its Lease
could pass to another node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

from kernel import arp
from nodeagent.api import service_lb
from nodeagent.client.events import EventRecorder
from nodeagent.client.informer import SharedInformers
from nodeagent.client.leader import LeaderElector
from nodeagent.client.rest import Client, ClientError
from nodeagent.clock import REAL_CLOCK, Clock, utcnow
from nodeagent.lbspeaker import election
from nodeagent.lbspeaker.config import SpeakerConfig
from nodeagent.lbspeaker.metrics import SpeakerMetrics, serve_metrics
from nodeagent.lbspeaker.responder import Responder

log = logging.getLogger("nodeagent.lbspeaker")
PROTOCOL = "layer2"


def announce_interface(config: SpeakerConfig) -> str:
    """--lb-interface, else the interface holding the node IP, else the default route's."""
    if config.interface:
        return config.interface
    if config.node_ip:
        return arp.interface_of(config.node_ip)
    return arp.default_route_interface()


class Speaker:
    def __init__(self, client: Client, config: SpeakerConfig, responder: Responder,
                 recorder: EventRecorder, informers: SharedInformers, clock: Clock = REAL_CLOCK) -> None:
        self.client, self.config, self.responder, self.recorder = client, config, responder, recorder
        self.clock = clock
        self.services = informers.get("services")
        self.slices = informers.get("endpointslices")
        self.nodes = informers.get("nodes")
        self.leases = informers.get("leases")
        self._free_since: dict[str, float] = {}  # ip -> when this node first saw its Lease free or expired
        self._electors: dict[str, LeaderElector] = {}
        self._renewed: dict[str, float] = {}  # ip -> monotonic time of the last successful renewal
        self._announced: dict[str, set[str]] = {}  # ip -> the Services announced with it (the metric)

    def _elector(self, ip: str) -> LeaderElector:
        el = self._electors.get(ip)
        if el is None:
            c = self.config
            el = self._electors[ip] = LeaderElector(
                self.client, election.lease_name(ip), c.node_name, c.lease_namespace,
                lease_duration=c.lease_duration, renew_deadline=c.lease_duration, retry_period=c.retry_period,
                clock=self.clock)
        return el

    async def tick(self) -> None:
        """One pass over every address: take, keep or give up its ownership."""
        try:
            await self._pass()
        finally:
            self._export()

    def _export(self) -> None:
        """metallb_speaker_announced: 1 per (address, Service) this node answers for."""
        gauge = self.responder.metrics.announced
        gauge.clear()
        for ip in self.responder.owned:
            for svc in self._announced.get(ip, ()):
                gauge.labels(ip, self.config.node_name, PROTOCOL, svc).set(1)

    async def _pass(self) -> None:
        by_ip = election.by_address(self.services.list())
        slices_of = election.slices_by_service(self.slices.list())
        me = self.nodes.get(self.config.node_name)
        ready = [n for n in self.nodes.list() if election.node_ready(n)]
        async with asyncio.TaskGroup() as tg:
            for ip, svcs in by_ip.items():
                ok, why = election.eligible(me, svcs, slices_of, self.config.node_name)
                candidates = [n["metadata"]["name"] for n in ready
                              if election.eligible(n, svcs, slices_of, n["metadata"]["name"])[0]]
                tg.create_task(self._step(ip, svcs, ok, why, candidates), name=f"lb {ip}")
            for ip in [i for i in self.responder.owned | set(self._electors) if i not in by_ip]:
                tg.create_task(self._give_up(ip, "no Service holds it any more", delete=True),
                               name=f"lb {ip} gone")

    def _my_turn(self, ip: str, candidates: list[str]) -> bool:
        """Whether to try for `ip`'s Lease now (see `election`: the ranking, then anyone after a while)."""
        me = self.config.node_name
        lease = self.leases.get(election.lease_name(ip), self.config.lease_namespace)
        holder, live = election.lease_holder(lease, utcnow(self.clock))
        if holder == me:
            return True  # ours (e.g. after a restart): renew it
        if live:
            self._free_since.pop(ip, None)
            return False
        first = self._free_since.setdefault(ip, self.clock.monotonic())
        order = election.ranking(ip, [c for c in candidates if c != holder])
        if order and order[0] == me:
            return True
        return self.clock.monotonic() - first >= self.config.lease_duration

    async def _step(self, ip: str, svcs: list[Any], ok: bool, why: str, candidates: list[str]) -> None:
        if not ok:
            if ip in self.responder.owned:
                await self._give_up(ip, why)
            return
        if ip not in self.responder.owned and not self._my_turn(ip, candidates):
            return
        now = self.clock.monotonic()
        try:
            got = await self._elector(ip).try_acquire_or_renew()
        except Exception as e:  # the apiserver is away: keep answering only while the Lease is surely ours
            if ip in self.responder.owned and \
                    now - self._renewed.get(ip, 0.0) > self.config.lease_duration - self.config.retry_period:
                log.warning("%s: cannot renew its lease (%s); no longer announcing it", ip, e)
                self.responder.disown(ip)
            return
        if not got:
            if ip in self.responder.owned:
                log.info("%s: another node holds its lease now", ip)
            self.responder.disown(ip)
            self._renewed.pop(ip, None)
            return
        self._renewed[ip] = now
        self._free_since.pop(ip, None)
        if ip not in self.responder.owned:
            self.responder.own(ip)
            message = f'announcing from node "{self.config.node_name}" with protocol "{PROTOCOL}"'
            for s in svcs:
                self.recorder.record(s, "Normal", "nodeAssigned", message)
        self._announced[ip] = {service_lb.key(s) for s in svcs}

    async def _give_up(self, ip: str, why: str, delete: bool = False) -> None:
        """Stop answering for `ip` and hand its Lease back (deleted when no Service holds the address)."""
        owned = ip in self.responder.owned
        self.responder.disown(ip)
        self._renewed.pop(ip, None)
        self._electors.pop(ip, None)
        self._announced.pop(ip, None)
        self._free_since.pop(ip, None)
        if owned:
            log.info("%s: giving it up: %s", ip, why)
        name, ns = election.lease_name(ip), self.config.lease_namespace
        try:
            lease = await self.client.get("leases", name, ns)
            if (lease.get("spec") or {}).get("holderIdentity") != self.config.node_name:
                return
            if delete:
                await self.client.delete("leases", name, ns)
            else:  # client-go's release: no holder, so a candidate takes it at its next try
                lease["spec"] = {**lease["spec"], "holderIdentity": None, "leaseDurationSeconds": 1}
                await self.client.update("leases", lease, ns)
        except ClientError as e:
            if not (e.not_found or e.conflict):
                log.warning("%s: releasing its lease: %s", ip, e)

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lb speaker pass failed; retrying")
            await self.clock.sleep(self.config.retry_period)

    async def release_all(self) -> None:
        """On stop: hand every Lease back, so another node takes over at once instead of on expiry."""
        for ip in list(self.responder.owned):
            await self._give_up(ip, "the speaker stops")


async def serve(config: SpeakerConfig, ready: asyncio.Event) -> None:
    metrics = SpeakerMetrics()
    try:
        interface = await asyncio.to_thread(announce_interface, config)
        responder = Responder(interface, metrics)
        responder.start()
    except arp.ArpError as e:  # the rest of the node runs; the log says why nothing is announced here
        log.error("lb speaker: cannot answer ARP (%s): this node announces no LoadBalancer address; give "
                  "--lb-interface, or --lb-announce none when another speaker (BGP) announces them", e)
        ready.set()
        await asyncio.Event().wait()
        return
    client = config.credentials.client()
    informers = SharedInformers(client, share=True)  # the process's: others read services, slices, nodes
    recorder = EventRecorder(client, "nodeagent-speaker", socket.gethostname())
    speaker = Speaker(client, config, responder, recorder, informers)
    runner = None
    try:
        if config.metrics_port:
            try:
                runner = await serve_metrics(metrics, config.metrics_port)
            except OSError as e:  # announcing matters more than its metrics
                log.warning("lb speaker: no /metrics on port %d (%s); pick another with --lb-metrics-port",
                            config.metrics_port, e)
        async with asyncio.TaskGroup() as tg:
            tg.create_task(recorder.run(), name="lb-speaker-events")
            await informers.run(tg)
            tg.create_task(speaker.run(), name="lb-speaker")
            log.info("lb speaker: answering ARP for this node's LoadBalancer addresses on %s", interface)
            ready.set()
    finally:
        with contextlib.suppress(Exception):
            await asyncio.shield(asyncio.wait_for(speaker.release_all(), 5))
        responder.close()
        if runner is not None:
            await runner.cleanup()
        await client.close()
