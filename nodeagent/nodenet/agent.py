"""Agent side: what the `nodenet` component (`nodenet_service`) runs. Publishes this node's underlay address
(and VTEP MAC) on its Node, then keeps routes / FDB / neighbour entries for every other node's podCIDR in step
with the Node informer (a node joining adds them, a node leaving removes them). The node's own pod subnet is
its spec.podCIDR (from the control plane's node IPAM); only a --pod-subnet override is published as an
annotation. Kernel work runs in a thread.
Everything is imported when the module loads (in the main thread, before the runtime forks containers):
an import inside a worker thread racing a fork can deadlock on logging's and the import lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from pyroute2.netlink.exceptions import NetlinkError

from nodeagent.api import service_lb
from nodeagent.client.informer import SharedInformer, shared
from nodeagent.client.rest import Client, ClientError
from nodeagent.nodenet import annotations as ann
from nodeagent.nodenet import bgppeer, masq
from nodeagent.nodenet import birdconf as bc
from nodeagent.nodenet import plan as P
from nodeagent.nodenet.bgp import BgpSpeaker, cluster_settings, node_peers
from nodeagent.nodenet.dataplane import Dataplane, source_address_towards
from nodeagent.nodenet.podcidr import node_pod_cidr

log = logging.getLogger("nodeagent.nodenet")

RESYNC = 30.0  # re-check the kernel even without Node events (someone deleted a route)


class NodeNet:
    def __init__(self, client: Client, node: str, pod_cidr: str | None, public_ip: str,
                 bird_dir: str = "") -> None:
        self.client = client
        self.bird_dir = bird_dir  # bgp mode: BIRD's files (Layout.bird_dir)
        self.bgp: BgpSpeaker | None = None
        self.peers: SharedInformer | None = None  # BGPPeer objects (bgp mode)
        self.services: SharedInformer | None = None  # for LoadBalancer addresses (bgp mode)
        self.slices: SharedInformer | None = None
        self._peer_problems: set[str] = set()
        self._snat: set[tuple[str, str]] = set()  # (cluster CIDR, Service range) masqueraded (bgp mode)
        self._bgp_task: asyncio.Task | None = None
        self._tg: asyncio.TaskGroup | None = None
        self.node = node
        self.override = pod_cidr  # --pod-subnet; None: the Node's spec.podCIDR
        self.pod_cidr: str | None = pod_cidr  # the subnet the dataplane was built for
        self.public_ip = public_ip
        self._waiting_logged = False
        # the process's informers (netpol's, the LB speaker's...); no resync of their own: run() steps every
        # RESYNC seconds anyway
        self.nodes = shared(client, "nodes")
        self.wake = asyncio.Event()
        self.mode: str | None = None
        self.cluster_cidr: str | None = None
        self._masq_op: asyncio.Future[None] | None = None  # the exemption's insert, in its thread
        self.dataplane: Any = None
        self.published = False
        self.announce: tuple[str, ...] = ()  # further addresses announced over BGP (set_announced)
        self.nodes.add_handler(lambda _n: self.wake.set(), lambda _o, _n: self.wake.set(),
                               lambda _n: self.wake.set())

    def _my_settings(self) -> tuple[str | None, str | None]:
        me = self.nodes.get(self.node)
        a = ((me or {}).get("metadata") or {}).get("annotations") or {}
        return a.get(ann.BACKEND), a.get(ann.CLUSTER_CIDR)

    async def step(self) -> None:
        """One reconcile: (re)build the device when the mode changes, publish, converge the entries."""
        mode, cidr = self._my_settings()
        if mode is None:
            return  # the server has not stamped our Node (yet), or we are not registered
        if mode not in ann.MODES:
            log.warning("node %s: unknown pod network %r; ignoring", self.node, mode)
            return
        spec_cidr = node_pod_cidr(self.nodes.get(self.node))
        pod_cidr = self.override or spec_cidr
        if pod_cidr is None:
            if not self._waiting_logged:
                log.info("node %s: waiting for its spec.podCIDR (from the node IPAM) before joining the pod "
                         "network", self.node)
                self._waiting_logged = True
            return
        if mode != self.mode or pod_cidr != self.pod_cidr or self.dataplane is None:
            if self.dataplane is not None:
                await asyncio.to_thread(self.dataplane.teardown)
            self.pod_cidr = pod_cidr
            self.dataplane = Dataplane(mode, self.public_ip, pod_cidr)
            await asyncio.to_thread(self.dataplane.setup)
            self.mode, self.published = mode, False
            log.info("node %s: pod network %s (underlay %s, pods %s%s)", self.node, mode, self.public_ip,
                     self.pod_cidr, f", VTEP {self.dataplane.vtep_mac}" if self.dataplane.vtep_mac else "")
        if cidr and cidr != self.cluster_cidr:
            old, self.cluster_cidr = self.cluster_cidr, cidr  # first: a stop meanwhile still removes the rule
            try:
                if old:
                    await asyncio.to_thread(masq.remove, old, self.node)
                # shielded: a stop waits for the insert to finish before its cleanup removes the rule
                self._masq_op = asyncio.ensure_future(asyncio.to_thread(masq.ensure, cidr, self.node))
                await asyncio.shield(self._masq_op)
            except Exception:
                self.cluster_cidr = old  # the next step tries again
                raise
        want = P.my_annotations(mode, self.public_ip, pod_cidr, self.dataplane.vtep_mac, spec_cidr)
        mine = ((self.nodes.get(self.node) or {}).get("metadata") or {}).get("annotations") or {}
        if not self.published or any(mine.get(k) != v for k, v in want.items()):
            # first time, or our Node was re-created / edited: publish again
            await self.client.patch("nodes", self.node, {"metadata": {"annotations": want}})
            self.published = True
        if mode == "bgp":
            await self._bgp_step(pod_cidr, cidr)
        else:
            await self._stop_bgp()
        plan = P.desired(mode, self.node, self.nodes.list())
        have = await asyncio.to_thread(self.dataplane.current)
        changes = P.diff(plan, have)
        if not changes.empty():
            log.info("node %s: routes +%d -%d, fdb +%d -%d, neigh +%d -%d", self.node,
                     len(changes.add_routes), len(changes.del_routes), len(changes.add_fdb),
                     len(changes.del_fdb), len(changes.add_neigh), len(changes.del_neigh))
            await asyncio.to_thread(self.dataplane.apply, changes)

    async def _bgp_step(self, pod_cidr: str, cluster_cidr: str | None) -> None:
        """bgp mode: BIRD (started on the first step, owned by run()'s TaskGroup) gets this cluster view."""
        if not cluster_cidr:
            return  # the server stamps it with the mode
        if not self.bird_dir:
            raise RuntimeError("bgp mode needs the node's BIRD directory (NodeNetConfig.bird_dir)")
        if self.bgp is None:
            assert self._tg is not None
            self.bgp = BgpSpeaker(self.client, self.node, self.bird_dir)
            self.peers = shared(self.client, bgppeer.RESOURCE)
            # LoadBalancer addresses (MetalLB's BGP mode): the Services' and their endpoints' views
            self.services = shared(self.client, "services")
            self.slices = shared(self.client, "endpointslices")
            for inf in (self.peers, self.services, self.slices):
                inf.add_handler(lambda _n: self.wake.set(), lambda _o, _n: self.wake.set(),
                                lambda _n: self.wake.set())
            self._bgp_task = self._tg.create_task(
                self._run_bgp(self.bgp, (self.peers, self.services, self.slices)), name="bgp")
        me = self.nodes.get(self.node) or {}
        asn, reflectors, services = cluster_settings(me)
        settings = bc.BirdSettings(
            node=self.node, router_id=self.public_ip, asn=asn, cluster_cidr=cluster_cidr, pod_cidr=pod_cidr,
            nodes=node_peers(self.nodes.list(), self.node), reflectors=reflectors,
            external=self.external_peers(me), service_cidrs=services,
            announce=tuple(sorted(set(self.load_balancer_ips(me)) | set(self.announce))))
        await self.bgp.update(settings, me)
        await self._service_snat(cluster_cidr, services)

    async def _service_snat(self, cluster_cidr: str | None, services: tuple[str, ...]) -> None:
        """Masquerade off-cluster traffic to the Service ranges announced to routers (see masq)."""
        want = {(cluster_cidr, s) for s in services} if cluster_cidr else set()
        for c, s in self._snat - want:
            await asyncio.to_thread(masq.remove_service_snat, c, s, self.node)
        for c, s in want - self._snat:
            await asyncio.to_thread(masq.ensure_service_snat, c, s, self.node)
        self._snat = want

    def set_announced(self, addresses: Iterable[str]) -> None:
        """Further addresses (or CIDRs) this node's BIRD announces to its external peers from now on,
        beside the pod CIDR, the Service ranges and the LoadBalancer addresses it finds itself."""
        self.announce = tuple(sorted(set(addresses)))
        self.wake.set()

    def external_peers(self, me: dict[str, Any]) -> tuple[bc.ExternalPeer, ...]:
        """The BGPPeer objects that select this node; one that cannot be honoured is logged and recorded
        on the Node once."""
        if self.peers is None:
            return ()
        problems: list[str] = []
        out = bgppeer.peers_for(me, self.peers.list(), problems)
        for p in problems:
            if p not in self._peer_problems and self.bgp is not None:
                log.warning("bgp: node %s: %s; no session for it", self.node, p)
                self.bgp.recorder.record(me, "Warning", "BGPPeerIgnored", f"{p}; no session for it")
        self._peer_problems = set(problems)
        return out

    def load_balancer_ips(self, me: dict[str, Any]) -> list[str]:
        """The LoadBalancer addresses this node announces to its external peers, as MetalLB's BGP mode:
        every allocated address of ours, from every node, except a node labelled
        exclude-from-external-load-balancers and, for externalTrafficPolicy: Local, a node without a ready
        endpoint of the Service (its traffic is not forwarded to other nodes)."""
        if self.services is None or self.slices is None:
            return []
        slices_of = service_lb.slices_by_service(self.slices.list())
        return [f"{ip}/32" for ip, svcs in sorted(service_lb.by_address(self.services.list()).items())
                if service_lb.eligible(me, svcs, slices_of, self.node)[0]]

    @staticmethod
    async def _run_bgp(speaker: BgpSpeaker, informers: tuple[SharedInformer, ...]) -> None:
        async with asyncio.TaskGroup() as tg:
            for inf in informers:
                tg.create_task(inf.run(), name=f"bgp-{inf.resource.name}")
            tg.create_task(speaker.run(), name="bgp-speaker")

    async def _stop_bgp(self) -> None:
        """Another mode: BIRD goes (it withdraws its routes) and our sessions annotation with it."""
        if self._bgp_task is None or self.bgp is None:
            return
        self._bgp_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._bgp_task
        await self.bgp.forget()
        await self._service_snat(None, ())
        self.bgp, self._bgp_task, self.peers, self.services, self.slices = None, None, None, None, None

    async def run(self, ready: asyncio.Event) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                tg.create_task(self.nodes.run())
                await self.nodes.wait_synced()
                ready.set()
                self.wake.set()
                while True:
                    # asyncio.timeout, not wait_for: on 3.11 wait_for loses a cancellation that arrives as the
                    # event is set (its inner task finishes first), and the agent would never stop
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(RESYNC):
                            await self.wake.wait()
                    self.wake.clear()
                    try:
                        await self.step()
                    except (ClientError, OSError, RuntimeError, NetlinkError) as e:
                        log.warning("node %s: pod network sync failed: %s; retrying", self.node, e)
                        self.published = False
                        await asyncio.sleep(1)
                        self.wake.set()
        finally:
            if self.bgp is not None:
                await asyncio.shield(self.bgp.forget())
            if self._masq_op is not None:
                await asyncio.shield(asyncio.gather(self._masq_op, return_exceptions=True))
            await asyncio.shield(asyncio.to_thread(self.cleanup))

    def cleanup(self) -> None:
        """On stop: our routes, tunnel device and masquerade rule go (nothing outlives the agent)."""
        if self.dataplane is not None:
            try:
                self.dataplane.teardown()
            except Exception as e:  # best effort on the way out
                log.warning("pod network teardown: %s", e)
        if self.cluster_cidr:
            masq.remove(self.cluster_cidr, self.node)
        for c, s in self._snat:
            masq.remove_service_snat(c, s, self.node)


def public_ip_for(server_url: str) -> str:
    host = urlsplit(server_url).hostname or "127.0.0.1"
    return source_address_towards(host)
