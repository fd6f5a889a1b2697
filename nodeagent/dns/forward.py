"""Forwarding to the node's upstream resolvers, with a cache that honours the answers' TTLs.

Positive answers live for the smallest TTL in them, negative ones (NXDOMAIN / NODATA) for the SOA's
negative TTL (RFC 2308) and are not cached without an SOA; SERVFAIL and timeouts are not cached.
TTLs handed out from the cache count down. Concurrent identical questions share one upstream query.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from pathlib import Path

import dns.asyncquery
import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype

from nodeagent.clock import REAL_CLOCK, Clock

log = logging.getLogger("nodeagent.dns.forward")
MAX_CACHE_TTL = 3600


def parse_upstream(text: str) -> tuple[str, int]:
    """'1.1.1.1', '1.1.1.1:5353', '[fd00::1]:53', 'fd00::1' -> (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, _, port = text[1:].partition("]")
        return host, int(port.lstrip(":") or 53)
    if text.count(":") == 1:
        host, _, port = text.partition(":")
        return host, int(port)
    return text, 53


def resolv_conf_nameservers(path: str | Path = "/etc/resolv.conf") -> list[tuple[str, int]]:
    out = []
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            out.append((parts[1].split("%")[0], 53))
    return out


@dataclasses.dataclass
class _Entry:
    response: dns.message.Message
    stored: float
    expires: float


@dataclasses.dataclass
class ForwardStats:
    queries: int = 0
    hits: int = 0
    upstream: int = 0
    failures: int = 0


class Forwarder:
    def __init__(self, upstreams: list[tuple[str, int]], timeout: float = 2.0, max_entries: int = 10000,
                 clock: Clock = REAL_CLOCK) -> None:
        self.upstreams = upstreams
        self.timeout = timeout
        self.max_entries = max_entries
        self.clock = clock
        self.cache: dict[tuple[str, int, int], _Entry] = {}
        self.stats = ForwardStats()
        self._inflight: dict[tuple[str, int, int], asyncio.Future[dns.message.Message | None]] = {}

    async def resolve(self, qname: dns.name.Name, qtype: dns.rdatatype.RdataType,
                      qclass: dns.rdataclass.RdataClass = dns.rdataclass.IN) -> dns.message.Message | None:
        """The upstream answer (TTLs aged when cached), or None when no upstream answered."""
        self.stats.queries += 1
        key = (qname.to_text().lower(), qtype, qclass)
        hit = self._cached(key)
        if hit is not None:
            self.stats.hits += 1
            return hit
        fut = self._inflight.get(key)
        if fut is not None:
            return await asyncio.shield(fut)
        fut = asyncio.get_running_loop().create_future()
        self._inflight[key] = fut
        try:
            resp = await self._ask(qname, qtype, qclass)
            if resp is not None:
                self._store(key, resp)
            fut.set_result(resp)
            return resp
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except Exception as e:
            fut.set_exception(e)
            fut.exception()  # retrieved: waiters re-raise it, nobody logs "never retrieved"
            raise
        finally:
            del self._inflight[key]

    async def _ask(self, qname: dns.name.Name, qtype: dns.rdatatype.RdataType,
                   qclass: dns.rdataclass.RdataClass) -> dns.message.Message | None:
        q = dns.message.make_query(qname, qtype, qclass, use_edns=0, payload=1232)
        for host, port in self.upstreams:
            self.stats.upstream += 1
            try:
                resp, _ = await dns.asyncquery.udp_with_fallback(q, host, timeout=self.timeout, port=port)
            except (dns.exception.DNSException, OSError) as e:
                log.debug("upstream %s:%d for %s: %s", host, port, qname, e)
                continue
            if resp.rcode() in (dns.rcode.SERVFAIL, dns.rcode.REFUSED):
                continue
            return resp
        self.stats.failures += 1
        return None

    def _ttl(self, resp: dns.message.Message) -> int | None:
        if resp.rcode() not in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN):
            return None
        if resp.answer and resp.rcode() == dns.rcode.NOERROR:
            return min(rr.ttl for rr in resp.answer + resp.authority)
        soa = [rr for rr in resp.authority if rr.rdtype == dns.rdatatype.SOA]
        if not soa:
            return None
        return min(soa[0].ttl, soa[0][0].minimum)

    def _store(self, key: tuple[str, int, int], resp: dns.message.Message) -> None:
        ttl = self._ttl(resp)
        if not ttl or ttl <= 0:
            return
        if len(self.cache) >= self.max_entries:
            now = self.clock.monotonic()
            self.cache = {k: e for k, e in self.cache.items() if e.expires > now}
            if len(self.cache) >= self.max_entries:
                self.cache.pop(next(iter(self.cache)))
        now = self.clock.monotonic()
        self.cache[key] = _Entry(resp, now, now + min(ttl, MAX_CACHE_TTL))

    def _cached(self, key: tuple[str, int, int]) -> dns.message.Message | None:
        e = self.cache.get(key)
        if e is None:
            return None
        now = self.clock.monotonic()
        if now >= e.expires:
            del self.cache[key]
            return None
        aged = int(now - e.stored)
        out = dns.message.from_wire(e.response.to_wire())
        for section in (out.answer, out.authority, out.additional):
            for rrs in section:
                rrs.ttl = max(0, rrs.ttl - aged)
        return out
