"""Answering ARP for the addresses this node owns, from a raw socket on the node's interface.

Why a responder rather than adding the address to the interface (kube-vip's way): an address on the
interface outlives the agent, so an owner killed with -9 would go on answering for it and no failover
could take the traffic; a socket dies with the process, and the next owner's gratuitous ARP moves every
neighbour within the lease time. It also keeps the kernel from using the address as a source and needs
no arp_announce/arp_ignore tuning on the node. Reads happen on the event loop through `add_reader`
(the socket is non-blocking), sends are single non-blocking frames.
"""

from __future__ import annotations

import asyncio
import logging
import socket

from kernel import arp
from nodeagent.lbspeaker.metrics import SpeakerMetrics

log = logging.getLogger("nodeagent.lbspeaker")

GARP_REPEATS = (0.0, 0.5, 2.0)  # seconds after takeover: neighbours that missed the first one update too


class Responder:
    def __init__(self, interface: str, metrics: SpeakerMetrics | None = None,
                 mac: bytes | None = None) -> None:
        self.interface = interface
        self.metrics = metrics or SpeakerMetrics()
        self.mac = mac or arp.interface_mac(interface)
        self.owned: set[str] = set()
        self.answered = 0
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._garp: dict[str, asyncio.Task[None]] = {}

    def start(self, sock: socket.socket | None = None) -> None:
        """Listen (on `sock` when given: a socket opened in another network namespace, as tests do)."""
        self._sock = sock or arp.open_socket(self.interface)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self._sock.fileno(), self._readable)

    def close(self) -> None:
        for t in self._garp.values():
            t.cancel()
        if self._sock is not None and self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
            self._sock = None

    def own(self, ip: str) -> None:
        """Answer for `ip` from now on, and tell the segment with gratuitous ARP."""
        if ip in self.owned:
            return
        self.owned.add(ip)
        log.info("announcing %s on %s (%s)", ip, self.interface, arp.mac_text(self.mac))
        self._garp[ip] = asyncio.create_task(self._announce(ip), name=f"garp {ip}")

    def disown(self, ip: str) -> None:
        if ip in self.owned:
            self.owned.discard(ip)
            log.info("no longer announcing %s", ip)
        task = self._garp.pop(ip, None)
        if task is not None:
            task.cancel()

    async def _announce(self, ip: str) -> None:
        last = 0.0
        for at in GARP_REPEATS:
            await asyncio.sleep(at - last)
            last = at
            if ip not in self.owned or self._sock is None:
                return
            for f in arp.gratuitous(ip, self.mac):
                arp.send(self._sock, f)
                self.metrics.gratuitous.labels(ip).inc()
        self._garp.pop(ip, None)

    def _readable(self) -> None:
        assert self._sock is not None
        for _ in range(64):  # a bounded batch per wake-up, so a flood cannot starve the loop
            try:
                data = self._sock.recv(128)
            except BlockingIOError:
                return
            except OSError as e:
                log.warning("ARP socket on %s: %s", self.interface, e)
                return
            pkt = arp.parse(data)
            if pkt is None or pkt.op != arp.REQUEST or pkt.target_ip not in self.owned:
                continue
            if pkt.sender_ip == pkt.target_ip:
                continue  # someone else's gratuitous ARP for the address, not a question
            self.metrics.requests.labels(pkt.target_ip).inc()
            try:
                arp.send(self._sock, arp.reply_to(pkt, self.mac))
                self.answered += 1
                self.metrics.responses.labels(pkt.target_ip).inc()
            except arp.ArpError as e:
                log.warning("%s", e)
