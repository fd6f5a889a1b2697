"""The DNS server: asyncio UDP and TCP listeners over one `Handler` (wire bytes in, wire bytes out).

Cluster answers are synchronous and their wire form is cached per (query bytes less the ID) until
the next informer event, so a cache-hot question costs one dict lookup. Forwarded questions run as
tasks owned by the server's TaskGroup. Over UDP an answer larger than 512 bytes (or the client's
EDNS0 size) is sent empty with the TC bit, and the client retries over TCP.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import struct
from collections.abc import Awaitable, Coroutine
from typing import Any

import dns.exception
import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdatatype

from nodeagent.dns.forward import Forwarder
from nodeagent.dns.records import Answer, ClusterRecords

log = logging.getLogger("nodeagent.dns")
UDP_MIN = 512
OUR_PAYLOAD = 1232
WIRE_CACHE_MAX = 20000
TCP_IDLE = 10.0


@dataclasses.dataclass
class Stats:
    queries: int = 0
    wire_hits: int = 0
    forwarded: int = 0
    truncated: int = 0
    errors: int = 0
    dropped: int = 0


class Handler:
    def __init__(self, records: ClusterRecords, forwarder: Forwarder | None) -> None:
        self.records = records
        self.forwarder = forwarder
        self.stats = Stats()
        self._wire: dict[bytes, bytes] = {}
        self._wire_gen = -1

    def handle(self, wire: bytes, udp: bool) -> bytes | None | Coroutine[Any, Any, bytes | None]:
        """The reply, or None to drop, or a coroutine of either (forwarded questions)."""
        self.stats.queries += 1
        if self._wire_gen != self.records.generation:
            self._wire.clear()
            self._wire_gen = self.records.generation
        key = (b"u" if udp else b"t") + wire[2:]
        hit = self._wire.get(key)
        if hit is not None:
            self.stats.wire_hits += 1
            return wire[:2] + hit
        try:
            q = dns.message.from_wire(wire)
        except dns.message.ShortHeader:
            return None
        except dns.exception.DNSException:
            return _header_error(wire, dns.rcode.FORMERR)
        if q.flags & dns.flags.QR:
            return None
        if q.opcode() != dns.opcode.QUERY:
            return _reply_wire(q, rcode=dns.rcode.NOTIMP, udp=udp)
        if len(q.question) != 1:
            return _reply_wire(q, rcode=dns.rcode.FORMERR, udp=udp)
        question = q.question[0]
        if question.rdtype in (dns.rdatatype.AXFR, dns.rdatatype.IXFR):
            return _reply_wire(q, rcode=dns.rcode.REFUSED, udp=udp)
        gen = self.records.generation
        ans = self.records.resolve(question.name, question.rdtype)
        if ans.forward:
            return self._forward(q, udp)
        if ans.chase is not None:
            return self._chase(q, ans, udp)
        out = _answer_wire(q, ans, udp, self.stats)
        if gen == self.records.generation:
            if len(self._wire) >= WIRE_CACHE_MAX:
                self._wire.clear()
            self._wire[key] = out[2:]
        return out

    async def _forward(self, q: dns.message.Message, udp: bool) -> bytes | None:
        self.stats.forwarded += 1
        question = q.question[0]
        if self.forwarder is None:
            return _reply_wire(q, rcode=dns.rcode.REFUSED, udp=udp)
        up = await self.forwarder.resolve(question.name, question.rdtype, question.rdclass)
        if up is None:
            return _reply_wire(q, rcode=dns.rcode.SERVFAIL, udp=udp)
        return _answer_wire(q, Answer(rcode=up.rcode(), answer=list(up.answer), authority=list(up.authority),
                                      additional=list(up.additional)), udp, self.stats, authoritative=False)

    async def _chase(self, q: dns.message.Message, ans: Answer, udp: bool) -> bytes | None:
        """An ExternalName CNAME: the CNAME plus the target's records from upstream; when no upstream
        answers, NODATA (CoreDNS leaves the CNAME out when its lookup fails)."""
        up = None
        if self.forwarder is not None and ans.chase is not None:
            up = await self.forwarder.resolve(ans.chase, q.question[0].rdtype)
        if up is None:
            ans = Answer(authority=[self.records.soa()])
        else:
            ans = dataclasses.replace(ans, answer=ans.answer + list(up.answer), chase=None)
        return _answer_wire(q, ans, udp, self.stats)


def _reply(q: dns.message.Message, rcode: dns.rcode.Rcode = dns.rcode.NOERROR,
           authoritative: bool = False) -> dns.message.Message:
    r = dns.message.make_response(q, recursion_available=True, our_payload=OUR_PAYLOAD)
    r.set_rcode(rcode)
    if authoritative:
        r.flags |= dns.flags.AA
    return r


def _reply_wire(q: dns.message.Message, rcode: dns.rcode.Rcode, udp: bool) -> bytes:
    return _to_wire(q, _reply(q, rcode), udp, None)


def _answer_wire(q: dns.message.Message, ans: Answer, udp: bool, stats: Stats,
                 authoritative: bool = True) -> bytes:
    r = _reply(q, ans.rcode, authoritative)
    r.answer = ans.answer
    r.authority = ans.authority
    r.additional = [rr for rr in ans.additional if rr.rdtype != dns.rdatatype.OPT]
    return _to_wire(q, r, udp, stats)


def _to_wire(q: dns.message.Message, r: dns.message.Message, udp: bool, stats: Stats | None) -> bytes:
    limit = max(UDP_MIN, min(q.payload, 65535)) if (udp and q.edns >= 0) else (UDP_MIN if udp else 65535)
    try:
        return r.to_wire(max_size=limit)
    except dns.exception.TooBig:
        if stats is not None:
            stats.truncated += 1
        r.answer, r.authority, r.additional = [], [], []
        r.flags |= dns.flags.TC
        return r.to_wire(max_size=limit)


def _header_error(wire: bytes, rcode: int) -> bytes | None:
    """FORMERR for a query whose header parses but whose body does not: header only, QR set."""
    if len(wire) < 12:
        return None
    qid, flags = struct.unpack("!HH", wire[:4])
    if flags & 0x8000:
        return None
    return struct.pack("!HHHHHH", qid, (flags & 0x7900) | 0x8000 | rcode, 0, 0, 0, 0)


# -------------------------------------------------------------------------------------- listeners
class _UDP:
    """A non-blocking UDP socket read from the event loop; each wake-up drains up to BATCH datagrams
    (one epoll round trip for many queries under load, where asyncio's datagram transport makes one
    per datagram). Replies are sent at once; a full socket buffer drops the reply, as UDP may."""

    BATCH = 64
    MAX_PENDING = 1024  # forwarded questions in flight; past that new ones are dropped (clients retry)

    def __init__(self, handler: Handler, tg: asyncio.TaskGroup, sock: socket.socket) -> None:
        self.handler = handler
        self.tg = tg
        self.sock = sock
        self.closed = False
        self.pending = 0
        self.pktinfo = want_pktinfo(sock)

    def on_readable(self) -> None:
        for _ in range(self.BATCH):
            try:
                if self.pktinfo:
                    data, anc, _flags, peer = self.sock.recvmsg(65535, 256)
                    addr: Any = (peer, reply_from(anc))
                else:
                    data, addr = self.sock.recvfrom(65535)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # e.g. ICMP port unreachable reported on the socket
                log.debug("dns: udp recv: %s", e)
                continue
            try:
                out = self.handler.handle(data, udp=True)
            except Exception:
                self.handler.stats.errors += 1
                log.exception("dns: query from %s", addr)
                out = _header_error(data, dns.rcode.SERVFAIL)
            if isinstance(out, bytes | bytearray):
                self._send(out, addr)
            elif out is not None:
                if self.pending >= self.MAX_PENDING:
                    self.handler.stats.dropped += 1
                    out.close()
                    continue
                self.pending += 1
                self.tg.create_task(self._later(out, addr))

    def _send(self, out: bytes, addr: Any) -> None:
        if self.closed:
            return
        try:
            if self.pktinfo:
                peer, anc = addr
                self.sock.sendmsg([out], anc, 0, peer)
            else:
                self.sock.sendto(out, addr)
        except (BlockingIOError, InterruptedError):
            self.handler.stats.errors += 1
        except OSError as e:
            log.debug("dns: udp send to %s: %s", addr, e)

    async def _later(self, aw: Awaitable[bytes | None], addr: Any) -> None:
        try:
            out = await aw
        except Exception:
            self.handler.stats.errors += 1
            log.exception("dns: forwarded query from %s", addr)
            return
        finally:
            self.pending -= 1
        if out is not None:
            self._send(out, addr)


IP_PKTINFO = 8  # linux/in.h; the socket module does not name it


def want_pktinfo(sock: socket.socket) -> bool:
    """On a wildcard address, ask for each datagram's destination address: a reply must leave from the
    address the query went to (a pod's query was DNATed to one of several host addresses, and conntrack
    only un-NATs a reply from that one), not whichever address the route back would pick."""
    host = sock.getsockname()[0]
    if host not in ("0.0.0.0", "::"):
        return False
    if sock.family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, 1)
    else:
        sock.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
    return True


def reply_from(ancillary: list[tuple[int, int, bytes]]) -> list[tuple[int, int, bytes]]:
    """The control message that sends a reply from the query's destination address (any interface)."""
    for level, kind, data in ancillary:
        if level == socket.IPPROTO_IP and kind == IP_PKTINFO and len(data) >= 12:
            # struct in_pktinfo {int ifindex; in_addr spec_dst; in_addr addr}: reply from addr
            return [(level, kind, struct.pack("=i4s4s", 0, data[8:12], b"\0" * 4))]
        if level == socket.IPPROTO_IPV6 and kind == socket.IPV6_PKTINFO and len(data) >= 20:
            return [(level, kind, data[:16] + struct.pack("=I", 0))]  # in6_pktinfo {addr; ifindex}
    return []


async def _tcp_client(handler: Handler, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      open_conns: set[asyncio.StreamWriter]) -> None:
    open_conns.add(writer)
    try:
        while True:
            try:
                async with asyncio.timeout(TCP_IDLE):
                    head = await reader.readexactly(2)
                async with asyncio.timeout(TCP_IDLE):
                    wire = await reader.readexactly(struct.unpack("!H", head)[0])
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                return
            out = handler.handle(wire, udp=False)
            if out is not None and not isinstance(out, bytes | bytearray):
                out = await out
            if out is None:
                return
            writer.write(struct.pack("!H", len(out)) + out)
            await writer.drain()
    except Exception:
        handler.stats.errors += 1
        log.exception("dns: tcp client")
    finally:
        open_conns.discard(writer)
        writer.close()


def split_hostport(listen: str, default_port: int = 53) -> tuple[str, int]:
    if listen.startswith("["):
        host, _, port = listen[1:].partition("]")
        return host, int(port.lstrip(":") or default_port)
    host, sep, port = listen.rpartition(":")
    return (host, int(port)) if sep else (listen, default_port)


async def run_listeners(handler: Handler, listen: str, ready: asyncio.Event | None = None,
                        bound: list[tuple[str, int]] | None = None) -> None:
    """Serve UDP and TCP on one address until cancelled (port 0: one free port for both)."""
    host, port = split_hostport(listen)
    loop = asyncio.get_running_loop()
    conns: set[asyncio.StreamWriter] = set()
    async with asyncio.TaskGroup() as tg:
        tcp = await asyncio.start_server(lambda r, w: _tcp_client(handler, r, w, conns), host, port,
                                         reuse_address=True)
        try:
            port = tcp.sockets[0].getsockname()[1]
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_DGRAM)
            try:
                sock.setblocking(False)
                sock.bind((host, port))
                udp = _UDP(handler, tg, sock)
                loop.add_reader(sock.fileno(), udp.on_readable)
                try:
                    if bound is not None:
                        bound.append((host, port))
                    log.info("dns: serving on %s:%d (udp, tcp)", host, port)
                    if ready is not None:
                        ready.set()
                    await asyncio.Future()  # until cancelled
                finally:
                    udp.closed = True
                    loop.remove_reader(sock.fileno())
            finally:
                sock.close()
        finally:
            tcp.close()
            for w in list(conns):
                w.close()
            await tcp.wait_closed()
