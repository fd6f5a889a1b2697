"""Cluster DNS records: a pure function of the Services, EndpointSlices/Endpoints, Pods and Namespaces.

No I/O. `ClusterRecords` reads the objects through a lister (the informers' caches in the server,
plain dicts in tests), keeps the indexes of `index.py` current from informer events (`changed`), and
answers one question at a time with an `Answer`. The name grammar and the NXDOMAIN / NODATA split follow
CoreDNS's kubernetes plugin (the Kubernetes DNS-Based Service Discovery spec):

- `<zone>`, `svc.<zone>`, `pod.<zone>` exist (NODATA); any other last label than svc/pod is NXDOMAIN;
- `<ns>.svc|pod.<zone>`: NODATA if the namespace exists, else NXDOMAIN;
- `<svc>.<ns>.svc`: ClusterIP(s); headless → ready endpoint IPs; ExternalName → CNAME;
- `<endpoint>.<svc>.<ns>.svc`: the endpoint whose hostname (or dashed IP) matches;
- `_<port>._<proto>.<svc>.<ns>.svc`: SRV per matching port (per endpoint when headless);
- more labels than that: NXDOMAIN; a name that exists but lacks the asked type: NODATA;
- `<a-b-c-d>.<ns>.pod`: the dashed IP (pods "insecure", kubeadm's default) or only a live pod's
  IP ("verified");
- PTR: a Service ClusterIP → its name, else each endpoint's name, else a pod's name; an address
  nobody owns falls through to the upstream resolvers (CoreDNS's `fallthrough in-addr.arpa`).
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import dns.name
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.IN.A
import dns.rdtypes.IN.AAAA
import dns.rrset

from nodeagent.clock import REAL_CLOCK, Clock
from nodeagent.dns.index import (
    Index,
    PodIndex,
    build_endpoints,
    build_services,
    merge_endpoints,
    relevant,
)

Obj = Mapping[str, Any]
Lister = Callable[[str], Iterable[Obj]]  # by kind: "services", "endpointslices", "endpoints", "pods", ...
KINDS = ("services", "endpointslices", "endpoints", "pods", "namespaces")
DNS_SCHEMA_VERSION = "1.1.0"

A, AAAA, CNAME, SRV, PTR, SOA, NS, TXT = (dns.rdatatype.A, dns.rdatatype.AAAA, dns.rdatatype.CNAME,
                                           dns.rdatatype.SRV, dns.rdatatype.PTR, dns.rdatatype.SOA,
                                           dns.rdatatype.NS, dns.rdatatype.TXT)
IN = dns.rdataclass.IN


@dataclasses.dataclass(frozen=True)
class Answer:
    """What to reply: rcode and sections, or `forward` (not ours: ask upstream), or a CNAME to chase."""

    rcode: dns.rcode.Rcode = dns.rcode.NOERROR
    answer: list[dns.rrset.RRset] = dataclasses.field(default_factory=list)
    authority: list[dns.rrset.RRset] = dataclasses.field(default_factory=list)
    additional: list[dns.rrset.RRset] = dataclasses.field(default_factory=list)
    forward: bool = False
    chase: dns.name.Name | None = None  # an ExternalName target outside the zone, for A/AAAA


class ClusterRecords:
    def __init__(self, lister: Lister, domain: str = "cluster.local", ttl: int = 30, pods: str = "insecure",
                 dns_service: tuple[str, str] = ("kube-system", "kube-dns"),
                 clock: Clock = REAL_CLOCK) -> None:
        if pods not in ("insecure", "verified", "disabled"):
            raise ValueError(f"pods mode must be insecure, verified or disabled, not {pods!r}")
        self.lister = lister
        self.clock = clock  # the SOA serial is the time of the last change
        self.domain = domain.strip(".").lower()
        self.zone = dns.name.from_text(self.domain)
        self._zone_labels = tuple(self.domain.split("."))
        self.ttl = ttl
        self.pods_mode = pods
        self.dns_service = dns_service
        self.generation = 0
        self.modified = int(self.clock.now())
        self._index: Index | None = None
        self._dirty: set[str] = set()
        self._pods: PodIndex | None = None
        self.synced = True  # False while the informers have not listed: no NXDOMAIN yet (SERVFAIL)

    def set_synced(self) -> None:
        self.synced = True
        self.invalidate()

    # ------------------------------------------------------------------ change side
    def invalidate(self, *_: Any) -> None:
        """Everything may have changed: rebuild every index from the lister on the next question."""
        self._index = None
        self._pods = None
        self._bump()

    def changed(self, kind: str, old: Obj | None, new: Obj | None) -> bool:
        """One informer event (old None: added, new None: deleted). Updates that change nothing DNS
        answers from are dropped (no cache flush); pods are indexed incrementally (they churn most),
        other kinds mark their part for a rebuild on the next question. True if anything changed."""
        if old is not None and new is not None and relevant(kind, old) == relevant(kind, new):
            return False
        if kind == "pods" and self._pods is not None:
            hostnamed = self._pods.remove(old) | self._pods.add(new)
            if hostnamed:
                self._dirty.add("merge")
        else:
            self._dirty.add("endpoints" if kind in ("endpointslices", "endpoints") else kind)
        self._bump()
        return True

    def _bump(self) -> None:
        self.generation += 1
        self.modified = int(self.clock.now())

    def index(self) -> Index:
        ix = self._index
        if self._pods is None:
            self._pods = PodIndex()
            for o in self.lister("pods"):
                self._pods.add(o)
            self._dirty.add("merge")
        if ix is None:
            ix = self._index = Index(set(), {}, {}, {}, {}, {}, self._pods.by_ip)
            self._dirty.update(("namespaces", "services", "endpoints"))
        if not self._dirty:
            return ix
        dirty, self._dirty = self._dirty, set()
        if "namespaces" in dirty:
            ix.namespaces = {(o.get("metadata") or {}).get("name", "") for o in self.lister("namespaces")}
        if "services" in dirty:
            ix.services, ix.service_by_ip = build_services(self.lister("services"))
        if "endpoints" in dirty:
            ix.raw_endpoints = build_endpoints(self.lister("endpointslices"), self.lister("endpoints"))
        if dirty & {"services", "endpoints", "pods", "merge"}:
            ix.endpoints, ix.endpoint_names = merge_endpoints(ix.raw_endpoints, ix.services,
                                                              self._pods.hostnamed.values())
        ix.pods_by_ip = self._pods.by_ip
        return ix

    # ------------------------------------------------------------------ question side
    def resolve(self, qname: dns.name.Name, qtype: dns.rdatatype.RdataType) -> Answer:
        labels = [lb.decode("ascii", "replace").lower() for lb in qname.labels if lb]
        zl = len(self._zone_labels)
        if len(labels) >= zl and tuple(labels[len(labels) - zl:]) == self._zone_labels:
            return self._zone_answer(qname, qtype, labels[:len(labels) - zl])
        if qtype == PTR or labels[-2:] in (["in-addr", "arpa"], ["ip6", "arpa"]):
            return self._reverse_answer(qname, qtype, labels)
        return Answer(forward=True)

    def soa(self) -> dns.rrset.RRset:
        rd = dns.rdata.from_text(IN, SOA, f"ns.dns.{self.domain}. hostmaster.{self.domain}. "
                                          f"{self.modified} 7200 1800 86400 {self.ttl}")
        return dns.rrset.from_rdata(self.zone, min(self.ttl, 300), rd)

    def _negative(self, rcode: dns.rcode.Rcode) -> Answer:
        return Answer(rcode=rcode, authority=[self.soa()])

    def _zone_answer(self, qname: dns.name.Name, qtype: dns.rdatatype.RdataType, rest: list[str],
                     depth: int = 0) -> Answer:
        if not rest and qtype == SOA:
            return Answer(answer=[self.soa()])
        if not rest and qtype == NS:
            ns_name = dns.name.from_text(f"ns.dns.{self.domain}")
            extra = self._rrset(ns_name, [(A, ip) for ip in self._dns_ips() if ":" not in ip])
            return Answer(answer=[dns.rrset.from_text(qname, self.ttl, IN, NS, ns_name.to_text())],
                          additional=extra)
        if qtype == TXT:
            if rest == ["dns-version"]:
                return Answer(answer=[dns.rrset.from_text(qname, 28800, IN, TXT, f'"{DNS_SCHEMA_VERSION}"')])
            return self._negative(dns.rcode.NOERROR)  # CoreDNS answers other TXT names with NODATA
        if rest == ["ns", "dns"]:
            fam = {A: ".", AAAA: ":"}.get(qtype)
            ips = [ip for ip in self._dns_ips() if fam and fam in ip]
            return Answer(answer=self._rrset(qname, [(qtype, ip) for ip in ips])) if ips else \
                self._negative(dns.rcode.NOERROR)
        found, items = self._records(rest)
        if not found:
            return self._negative(dns.rcode.NXDOMAIN if self.synced else dns.rcode.SERVFAIL)
        if qtype in (A, AAAA):
            return self._address_answer(qname, qtype, items, depth)
        if qtype == SRV:
            return self._srv_answer(qname, items)
        if qtype == CNAME:
            names = [(CNAME, host + ".") for host, _, _ in items if not _is_ip(host)]
            return Answer(answer=self._rrset(qname, names)) if names else self._negative(dns.rcode.NOERROR)
        return self._negative(dns.rcode.NOERROR)

    def _address_answer(self, qname: dns.name.Name, qtype: dns.rdatatype.RdataType,
                        items: list[tuple[str, int, str]], depth: int = 0) -> Answer:
        for host, _, _ in items:
            if not _is_ip(host):  # ExternalName: CNAME, then the target's addresses
                target = dns.name.from_text(host)
                if target == qname:
                    continue  # x CNAME x: a direct loop, left out (CoreDNS)
                cname = dns.rrset.from_text(qname, self.ttl, IN, CNAME, target.to_text())
                if not target.is_subdomain(self.zone):
                    return Answer(answer=[cname], chase=target)
                if depth >= 7:  # a longer loop inside the zone
                    continue
                inner = self._zone_answer(target, qtype, _rest_of(target, self.zone), depth + 1)
                if inner.answer:  # the CNAME only with what it leads to (CoreDNS)
                    return Answer(answer=[cname, *(rr for rr in inner.answer if rr != cname)],
                                  additional=inner.additional)
        want = "." if qtype == A else ":"
        ips = [host for host, _, _ in items if want in host and _is_ip(host)]
        if not ips:
            return self._negative(dns.rcode.NOERROR)
        return Answer(answer=self._rrset(qname, [(qtype, ip) for ip in ips]))

    def _srv_answer(self, qname: dns.name.Name, items: list[tuple[str, int, str]]) -> Answer:
        srv = [(host, port, target) for host, port, target in items if _is_ip(host) and port >= 0]
        if not srv:
            return self._negative(dns.rcode.NOERROR)
        seen: dict[tuple[int, str], str] = {}
        for host, port, target in srv:
            seen.setdefault((port, target), host)
        weight = max(1, 100 // len(items))  # CoreDNS: 100 / every candidate, at least 1
        rrs = self._rrset(qname, [(SRV, f"0 {weight} {port} {target}.") for port, target in seen])
        extra: dict[str, list[tuple[dns.rdatatype.RdataType, str]]] = {}
        for (_, target), host in seen.items():
            rec = (AAAA if ":" in host else A, host)
            if rec not in extra.setdefault(target, []):
                extra[target].append(rec)
        additional = [rr for t, recs in extra.items() for rr in self._rrset(dns.name.from_text(t), recs)]
        return Answer(answer=rrs, additional=additional)

    def _records(self, rest: list[str]) -> tuple[bool, list[tuple[str, int, str]]]:
        """(name exists, [(host IP or CNAME target, port, SRV target name)]) for a name inside the zone."""
        if not rest or rest in (["svc"], ["pod"]):
            return True, []
        kind = rest[-1]
        if kind not in ("svc", "pod"):
            return False, []
        ix = self.index()
        if len(rest) == 2:
            return rest[0] in ix.namespaces, []
        if len(rest) > 5:
            return False, []
        ns, name = rest[-2], rest[-3]
        if ns not in ix.namespaces or (kind == "pod" and self.pods_mode == "disabled"):
            return False, []
        if kind == "pod":
            ip = _undash(name)
            if ip is None:
                return False, []
            if self.pods_mode == "verified" and not any(p[0] == ns for p in ix.pods_by_ip.get(ip, [])):
                return False, []
            return True, [(ip, -1, "")]
        endpoint = rest[-4] if len(rest) == 4 else ""
        port = proto = ""
        if len(rest) == 5:
            port, proto = rest[0].removeprefix("_"), rest[1].removeprefix("_")
        svc = ix.services.get((ns, name))
        if svc is None:
            return False, []
        base = f"{svc.name}.{svc.namespace}.svc.{self.domain}"
        if svc.type == "ExternalName":
            if endpoint or _is_ip(svc.external_name) or not svc.external_name:
                return False, []
            return True, [(svc.external_name.rstrip("."), -1, "")]
        out: list[tuple[str, int, str]] = []
        found = False
        if svc.headless or endpoint:
            for ep in ix.endpoints.get((ns, name), []):
                if endpoint and ep.label().lower() != endpoint:
                    continue
                for p in ep.ports:
                    if _port_match(port, p.name, proto, p.protocol):
                        found = True
                        out.append((ep.ip, p.port, f"{ep.label()}.{base}"))
            return found, out
        for p in svc.ports:
            if _port_match(port, p.name, proto, p.protocol):
                found = True
                out.extend((ip, p.port, base) for ip in svc.cluster_ips)
        return found, out

    def _reverse_answer(self, qname: dns.name.Name, qtype: dns.rdatatype.RdataType,
                        labels: list[str]) -> Answer:
        ip = _reverse_ip(labels)
        if ip is None:
            return Answer(forward=True)
        ix = self.index()
        names: list[str] = []
        if ip in ix.service_by_ip:
            ns, name = ix.service_by_ip[ip]
            names = [f"{name}.{ns}.svc.{self.domain}"]
        elif ip in ix.endpoint_names:
            names = [f"{n}.svc.{self.domain}" for n in ix.endpoint_names[ip]]
        elif ip in ix.pods_by_ip:
            for ns, _, hostname, subdomain in ix.pods_by_ip[ip]:
                if hostname and subdomain:
                    names.append(f"{hostname}.{subdomain}.{ns}.svc.{self.domain}")
                else:
                    names.append(f"{ip.replace('.', '-').replace(':', '-')}.{ns}.pod.{self.domain}")
        if not names:
            return Answer(forward=True)  # not a cluster address: fall through to the upstreams
        if qtype != PTR:
            return self._negative(dns.rcode.NOERROR)
        return Answer(answer=self._rrset(qname, [(PTR, n + ".") for n in dict.fromkeys(names)]))

    def _dns_ips(self) -> list[str]:
        svc = self.index().services.get(self.dns_service)
        return list(svc.cluster_ips) if svc else []

    def _rrset(self, owner: dns.name.Name,
               records: list[tuple[dns.rdatatype.RdataType, str]]) -> list[dns.rrset.RRset]:
        """One RRset per type, duplicates dropped, in first-seen order."""
        by_type: dict[dns.rdatatype.RdataType, dns.rrset.RRset] = {}
        for rdtype, text in records:
            rrs = by_type.get(rdtype)
            if rrs is None:
                rrs = by_type[rdtype] = dns.rrset.RRset(owner, IN, rdtype)
                rrs.update_ttl(self.ttl)
            if rdtype == A:  # the hot types built directly: from_text runs a tokenizer
                rrs.add(dns.rdtypes.IN.A.A(IN, A, text))
            elif rdtype == AAAA:
                rrs.add(dns.rdtypes.IN.AAAA.AAAA(IN, AAAA, text))
            else:
                rrs.add(dns.rdata.from_text(IN, rdtype, text))
        return list(by_type.values())


def build_index(lister: Lister) -> Index:
    """Every index at once from the lister (tests, benchmarks)."""
    return ClusterRecords(lister).index()


def _port_match(want_port: str, port: str, want_proto: str, proto: str) -> bool:
    return (not want_port or want_port == port.lower()) and (not want_proto or want_proto == proto.lower())


def _is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s)
        return True
    except ValueError:
        return False


def _undash(label: str) -> str | None:
    """'10-1-2-3' -> '10.1.2.3', 'fd00--1' -> 'fd00::1'; None when it is not an address."""
    text = label.replace("-", ".") if label.count("-") == 3 and "--" not in label else label.replace("-", ":")
    return str(ipaddress.ip_address(text)) if _is_ip(text) else None


def _reverse_ip(labels: list[str]) -> str | None:
    if labels[-2:] == ["in-addr", "arpa"] and len(labels) == 6:
        text = ".".join(reversed(labels[:4]))
    elif labels[-2:] == ["ip6", "arpa"] and len(labels) == 34:
        nib = "".join(reversed(labels[:32]))
        text = ":".join(nib[i:i + 4] for i in range(0, 32, 4))
    else:
        return None
    return str(ipaddress.ip_address(text)) if _is_ip(text) else None


def _rest_of(name: dns.name.Name, zone: dns.name.Name) -> list[str]:
    rel = name.relativize(zone)
    return [lb.decode("ascii", "replace").lower() for lb in rel.labels if lb and rel != dns.name.empty]


def dict_lister(objects: Mapping[str, Iterable[Obj]]) -> Lister:
    """A lister over in-memory lists/dicts of objects (tests, benchmarks)."""
    return lambda kind: list(objects.get(kind, ()))
