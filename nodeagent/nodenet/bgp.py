"""The bgp pod network on one node (`--pod-network bgp`): BIRD configured from the Node (and BGPPeer) objects,
as calico/node's confd and BIRD do, and its sessions reported back on the Node.

`NodeNet` (agent.py) calls `update()` with the cluster view on every reconcile; `run()` owns the supervised
BIRD (`bird.Bird`), the session reporter and the Event writer. A render BIRD refuses (`bird -p`) is never
loaded: the last good config keeps running and the refusal is logged and recorded as a Warning Event on the
Node.

Session state lives in the Node's `nodeagent.io/bgp-sessions` annotation (a JSON list: name, peer, address,
state, since, lastError), not in a condition: a condition carries one status for the node, while a node
holds one session per peer, each with BIRD's own state and last error; the kubelet also owns the Node's
conditions, which it rewrites from its own view. An Event is recorded when a session becomes Established
or leaves that state.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from nodeagent.client.events import EventRecorder
from nodeagent.client.rest import Client, ClientError
from nodeagent.nodenet import annotations as ann
from nodeagent.nodenet import birdconf as bc
from nodeagent.nodenet.bird import Bird, BirdDown, InvalidConfig

log = logging.getLogger("nodeagent.nodenet.bgp")

STATUS_EVERY = 3.0  # seconds between session reports


def cluster_settings(node: Mapping[str, Any] | None) -> tuple[int, tuple[str, ...], tuple[str, ...]]:
    """(AS, route reflectors, Service ranges to announce) the server stamped on the Node."""
    a = ((node or {}).get("metadata") or {}).get("annotations") or {}
    try:
        asn = int(a.get(ann.BGP_AS) or bc.DEFAULT_AS)
    except ValueError:
        asn = bc.DEFAULT_AS
    split = lambda v: tuple(x.strip() for x in (v or "").split(",") if x.strip())  # noqa: E731
    return asn, split(a.get(ann.BGP_ROUTE_REFLECTORS)), split(a.get(ann.BGP_SERVICE_CIDRS))


def node_peers(nodes: Iterable[Mapping[str, Any]], me: str) -> tuple[bc.NodePeer, ...]:
    """Every other node that published its underlay address."""
    out = []
    for n in nodes:
        meta = n.get("metadata") or {}
        ip = (meta.get("annotations") or {}).get(ann.PUBLIC_IP)
        if meta.get("name") == me or not ip or meta.get("deletionTimestamp"):
            continue
        try:
            ipaddress.IPv4Address(ip)
        except ValueError:
            continue
        out.append(bc.NodePeer(meta["name"], ip))
    return tuple(sorted(out, key=lambda p: p.name))


def sessions_of(settings: bc.BirdSettings, protocols: list[Any] | None,
                down_reason: str = "") -> list[dict[str, str]]:
    """The annotation's list: one entry per BGP session the config holds, with BIRD's view of it (or the
    reason BIRD cannot be asked)."""
    expected: dict[str, tuple[str, str]] = {}
    for node, _client in bc.node_sessions(settings):
        expected[bc.mesh_protocol(node.ip)] = (f"node {node.name}", node.ip)
    for e in settings.external:
        if e.ip != settings.router_id:
            expected[bc.external_protocol(e)] = (f"BGPPeer {e.name}", e.ip)
    seen = {p.name: p for p in protocols or [] if p.proto == "BGP"}
    out: list[dict[str, str]] = []
    for name, (peer, ip) in sorted(expected.items()):
        p = seen.get(name)
        if p is None:
            out.append({"name": name, "peer": peer, "address": ip, "state": "Down",
                        "lastError": down_reason or "not configured in BIRD yet"})
            continue
        entry = {"name": name, "peer": peer, "address": ip,
                 "state": p.bgp_state or p.state, "since": p.since}
        if p.last_error:
            entry["lastError"] = p.last_error
        out.append(entry)
    return out


class BgpSpeaker:
    def __init__(self, client: Client, node: str, bird_dir: str,
                 recorder: EventRecorder | None = None) -> None:
        self.client = client
        self.node = node
        self.bird = Bird(bird_dir)
        self.recorder = recorder or EventRecorder(client, "nodeagent-bgp", node)
        self.settings: bc.BirdSettings | None = None
        self.refused: str | None = None  # the last render BIRD refused, while it is the wanted one
        self._published: str | None = None
        self._established: set[str] = set()
        self._node_obj: Mapping[str, Any] = {}
        self._missing_reflectors: list[str] = []

    async def update(self, settings: bc.BirdSettings, node_obj: Mapping[str, Any]) -> None:
        """Render, check and load the config for this cluster view (nothing when it is unchanged)."""
        self._node_obj = node_obj
        settings = _with_log(settings, self.bird.files.log_file)
        text = bc.render(settings)
        try:
            what = await self.bird.apply(text)
        except InvalidConfig as e:
            if self.refused != text:
                log.error("bgp: node %s: BIRD refused the rendered config; keeping the running one: %s",
                          self.node, e)
                self.recorder.record(node_obj, "Warning", "BGPConfigInvalid",
                                     f"BIRD refused the rendered configuration (bird -p): {e}")
            self.refused = text
            return
        except BirdDown as e:
            log.warning("bgp: node %s: reloading BIRD failed (%s); it is retried", self.node, e)
            raise RuntimeError(f"BIRD reload: {e}") from None
        self.refused = None
        self.settings = settings
        known = {p.name for p in settings.nodes} | {settings.node}
        missing = sorted(set(settings.reflectors) - known)
        if missing and missing != self._missing_reflectors:
            names = ", ".join(missing)
            log.warning("bgp: node %s: route reflector(s) %s named by --bgp-route-reflectors are not "
                        "nodes of this cluster (yet); no session to them until they join", self.node, names)
            self.recorder.record(node_obj, "Warning", "BGPRouteReflectorMissing",
                                 f"route reflector(s) {names} are not nodes of this cluster (yet)")
        self._missing_reflectors = missing
        if what != "unchanged":
            peers = ", ".join(f"{p.name} ({p.ip})" for p, _ in bc.node_sessions(settings)) or "none"
            log.info("bgp: node %s: BIRD %s: AS %d, %s, iBGP peers: %s%s", self.node, what, settings.asn,
                     f"route reflectors {', '.join(settings.reflectors)}" if settings.reflectors
                     else "node-to-node mesh", peers,
                     "".join(f"; BGPPeer {e.name} {e.ip} AS {e.asn}" for e in settings.external))

    async def run(self) -> None:
        """BIRD, the session reporter and the Event writer, until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self.recorder.run(), name="bgp-events")
            tg.create_task(self.bird.run(), name="bird")
            tg.create_task(self._report(), name="bgp-sessions")

    async def _report(self) -> None:
        while True:
            await asyncio.sleep(STATUS_EVERY)
            if self.settings is None:
                continue
            try:
                await self.report_once()
            except ClientError as e:
                log.warning("bgp: node %s: cannot publish its BGP sessions: %s", self.node, e)

    async def report_once(self) -> list[dict[str, str]]:
        assert self.settings is not None
        try:
            protocols: list[Any] | None = await self.bird.protocols()
            reason = ""
        except BirdDown as e:
            protocols, reason = None, f"BIRD is not running ({e}); it is being restarted"
        sessions = sessions_of(self.settings, protocols, reason)
        self._events(sessions)
        value = json.dumps(sessions, sort_keys=True, separators=(",", ":"))
        if value != self._published:
            await self.client.patch("nodes", self.node,
                                    {"metadata": {"annotations": {ann.BGP_SESSIONS: value}}})
            self._published = value
        return sessions

    def _events(self, sessions: list[dict[str, str]]) -> None:
        up = {s["name"] for s in sessions if s["state"] == "Established"}
        for s in sessions:
            if s["name"] in up and s["name"] not in self._established:
                self.recorder.record(self._node_obj, "Normal", "BGPSessionEstablished",
                                     f"BGP session {s['name']} with {s['peer']} ({s['address']}) "
                                     "is Established")
            elif s["name"] not in up and s["name"] in self._established:
                self.recorder.record(self._node_obj, "Warning", "BGPSessionDown",
                                     f"BGP session {s['name']} with {s['peer']} ({s['address']}) is "
                                     f"{s['state']}: {s.get('lastError') or 'no error reported'}")
        self._established = up

    async def forget(self) -> None:
        """On stop: our sessions annotation goes (BIRD is stopped by run()'s cancellation)."""
        if self._published is None:
            return
        with contextlib.suppress(ClientError, OSError):
            await self.client.patch("nodes", self.node,
                                    {"metadata": {"annotations": {ann.BGP_SESSIONS: None}}})


def _with_log(s: bc.BirdSettings, log_file: str) -> bc.BirdSettings:
    import dataclasses

    return dataclasses.replace(s, log_file=log_file)
