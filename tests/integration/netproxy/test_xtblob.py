"""The x_tables blob editor against iptables-legacy itself: after each partial change, the kernel's
table written by xtblob is byte-for-byte the one iptables-legacy-restore writes for the same change
(counters and kernel bookkeeping aside), other software's rules and counters are kept, and drift
under the editor (a foreign write between changes) is read back rather than overwritten."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Mapping

import pytest

from kernel import xtables as xtsock
from kernel.netns import NetnsWorker
from kernel.xtables import open_socket
from netproxy.iptables.plan import full_restore, partial_ops, partial_restore, plan_port
from netproxy.iptables.xtblob import XtTable, encode
from netproxy.model import Endpoint, ServicePort, ServicePortName, parse_service
from netproxy.proxier import NodeConfig
from nodeagent.testing.netproxy_lab import service

pytestmark = pytest.mark.root

NODE = NodeConfig(node_name="me", cluster_cidr="10.244.0.0/16")
FOREIGN = """*nat
:DOCKER - [0:0]
[5:300] -A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER
[2:120] -A DOCKER -i docker0 -j RETURN
COMMIT
"""


def _port(i: int, **kw):
    ports = [{"name": "http", "port": 80, **kw.pop("port", {})}]
    sp = next(iter(parse_service(service(f"s{i}", f"10.96.0.{i + 1}", ports, **kw)).values()))
    return sp, [Endpoint(f"10.244.{i}.{k + 1}", 8080) for k in range(3)]


def _raw(table: str) -> bytes:
    """The table's bytes with what the kernel fills in (counters, comefrom) zeroed."""
    with open_socket() as s:
        info = xtsock.get_info(s, table)
        buf = xtsock.get_entries(s, info)
        blob = bytearray(memoryview(buf)[:96 + info.size])
        XtTable(table)._parse(blob, info)
        return bytes(blob[96:]) + repr((info.hook_entry, info.underflow)).encode()


def _save(ns: str, table: str, counters: bool = False) -> list[str]:
    out = subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy-save", "-t", table]
                         + (["-c"] if counters else []), capture_output=True, text=True, check=True).stdout
    return [ln for ln in out.splitlines() if not ln.startswith("#")]


class Twin:
    """Two netns with the same start: `ref` changed by iptables-legacy-restore, `blob` by xtblob."""

    def __init__(self, res, plans) -> None:
        self.ref, self.blob = res.netns(), res.netns()
        for ns in (self.ref, self.blob):
            for text in (FOREIGN, full_restore(plans, NODE)):
                subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy-restore", "-c", "--noflush"],
                               input=text, text=True, check=True)
        self.plans = plans
        self.tables: dict[str, XtTable] = {}
        self.ref_w, self.blob_w = NetnsWorker(self.ref), NetnsWorker(self.blob)

    def _apply(self, ops) -> None:
        with open_socket() as s:
            for table, table_ops in ops.items():
                self.tables.setdefault(table, XtTable(table)).apply(s, table_ops)

    def change(self, changes: Mapping[ServicePortName, tuple[ServicePort, list[Endpoint]] | None]) -> None:
        new = dict(self.plans)
        for spn, value in changes.items():
            if value is None:
                new.pop(spn, None)
            else:
                new[spn] = plan_port(*value, NODE)
        text = partial_restore(self.plans, new, list(changes))
        if text:
            subprocess.run(["ip", "netns", "exec", self.ref, "iptables-legacy-restore", "--noflush"],
                           input=text, text=True, check=True)
        self.blob_w.call(self._apply, partial_ops(self.plans, new, list(changes)))
        self.plans = new
        for table in ("nat", "filter"):
            assert _save(self.blob, table) == _save(self.ref, table)
            assert self.blob_w.call(_raw, table) == self.ref_w.call(_raw, table)

    def close(self) -> None:
        self.ref_w.close()
        self.blob_w.close()


def test_partial_changes_match_iptables_restore_byte_for_byte(res):
    ports = [_port(0), _port(1), _port(2, sessionAffinity="ClientIP"),
             _port(3, type="NodePort", port={"nodePort": 30080}), _port(4),
             _port(5, port={"protocol": "UDP"})]
    twin = Twin(res, {sp.name: plan_port(sp, eps, NODE) for sp, eps in ports})
    try:
        (s0, e0), (s1, e1), (s2, e2), (s3, e3), (s4, _), (s5, e5) = ports
        twin.change({s0.name: (s0, e0[:2] + [Endpoint("10.250.0.1", 8080)])})  # one endpoint replaced
        twin.change({s1.name: (s1, [])})  # no endpoints: nat dispatch out, filter REJECT in
        twin.change({s1.name: (s1, e1)})
        s9, e9 = _port(9)
        twin.change({s9.name: (s9, e9)})  # a new Service: new chains in name order
        twin.change({s4.name: None})  # a removed Service: its chains deleted
        twin.change({s3.name: (s3, e3[:1]), s0.name: (s0, e0)})  # NodePort + several ports at once
        twin.change({s2.name: (s2, e2[1:]), s5.name: (s5, e5[:1])})  # affinity (recent), UDP
        for table in ("nat", "filter"):  # one read of the kernel per table, then the index is reused
            assert twin.tables[table].reparsed == 1
        foreign = [ln for ln in _save(twin.blob, "nat", counters=True)
                   if "DOCKER" in ln and ln.startswith("[")]
        assert foreign == ["[5:300] -A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER",
                           "[2:120] -A DOCKER -i docker0 -j RETURN"]
        twin.change({sp.name: None for sp, _ in ports if sp.name != s4.name} | {s9.name: None})
        assert not [ln for ln in _save(twin.blob, "nat") if "KUBE-SVC-" in ln or "KUBE-SEP-" in ln]
    finally:
        twin.close()


def test_foreign_write_between_changes_is_kept(res):
    (s0, e0), (s1, e1) = _port(0), _port(1)
    twin = Twin(res, {s0.name: plan_port(s0, e0, NODE), s1.name: plan_port(s1, e1, NODE)})
    try:
        twin.change({s0.name: (s0, e0[:2])})
        for ns in (twin.ref, twin.blob):  # same size and count: only the bytes tell the difference
            subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy", "-t", "nat", "-R", "DOCKER", "1",
                            "-i", "docker1", "-j", "RETURN"], check=True)
        twin.change({s1.name: (s1, e1[:1])})
        assert "-A DOCKER -i docker1 -j RETURN" in _save(twin.blob, "nat")
        assert twin.tables["nat"].reparsed == 2
    finally:
        twin.close()


@pytest.mark.parametrize("spec", [
    '-m comment --comment "ns/svc:http cluster IP" -m tcp -p tcp -d 10.96.0.1/32 --dport 80 '
    "! -s 10.0.0.0/8 -j KUBE-X",
    '-m comment --comment "ns/svc:http -> 10.1.2.3:8080" -m statistic --mode random '
    "--probability 0.3333333333 -j KUBE-X",
    "-s 10.1.2.3/32 -j KUBE-X",
    "-m tcp -p tcp -j DNAT --to-destination 10.1.2.3:8080",
    "-m recent --name KUBE-X --mask 255.255.255.255 --rsource --rcheck --seconds 30 --reap -j KUBE-X",
    "-m recent --name KUBE-X --mask 255.255.255.255 --rsource --set -m udp -p udp "
    "-j DNAT --to-destination 10.1.2.3:53",
    '-m comment --comment "m" -m addrtype --src-type LOCAL -j KUBE-X',
    "-m sctp -p sctp -d 10.96.0.1/32 --dport 80 -j KUBE-X",
    "-j RETURN",
    '-m comment --comment "x has no endpoints" -m tcp -p tcp -d 10.96.0.9/32 --dport 80 -j REJECT '
    "--reject-with icmp-port-unreachable",
    "-m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30080 -j DROP",
])
def test_encoding_matches_iptables_legacy(res, spec):
    """Each rule shape the plan emits, as iptables-legacy stores it in the kernel."""
    import shlex

    ns = res.netns()
    table = "filter" if "REJECT" in spec or "DROP" in spec else "nat"
    for cmd in (["-N", "KUBE-X"], ["-A", "KUBE-X", *shlex.split(spec)]):
        subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy", "-t", table, *cmd], check=True)
    worker = NetnsWorker(ns)
    try:
        def read():
            with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW) as s:
                xt = XtTable(table)
                xt._fetch(s)
                _, first, tail = xt._chain_span("KUBE-X")
                assert xt._blob is not None  # fetched
                return bytes(xt._blob[96 + first:96 + tail]), first
        kernel, first = worker.call(read)
    finally:
        worker.close()
    enc = encode(spec)
    mine = bytearray(enc.data)
    if enc.jump:
        mine[enc.verdict_at:enc.verdict_at + 4] = first.to_bytes(4, "little", signed=True)
    assert bytes(mine) == kernel


def test_proxier_changes_through_the_blob_and_recovers_from_drift(res):
    """The proxier with incremental="xtblob" edits the blob; drift under it (KUBE-SERVICES flushed by hand)
    fails the next change instead of writing on top of it, and the full sync repairs."""
    from netproxy.iptables.proxier import IptablesProxier
    from netproxy.iptables.xtblob import BlobError
    from netproxy.tracker import Changes, ProxyState

    ns = res.netns()
    proxier = IptablesProxier(NodeConfig(node_name="me", cluster_cidr="10.244.0.0/16", prefix=f"K{ns[-6:]}-"),
                              incremental="xtblob")
    state = ProxyState()
    (s0, e0), (s1, e1) = _port(0), _port(1)
    state.services.update({s0.name: s0, s1.name: s1})
    state.endpoints.update({s0.name: tuple(e0), s1.name: tuple(e1)})
    worker = NetnsWorker(ns)
    try:
        worker.call(proxier.sync, state, Changes(), True)
        state.endpoints[s0.name] = tuple(e0[:1])
        worker.call(proxier.sync, state, Changes(ports={s0.name}), False)
        nat = "\n".join(_save(ns, "nat"))
        assert "10.244.0.1:8080" in nat and "10.244.0.2:8080" not in nat and "10.244.1.3:8080" in nat
        assert proxier._xt["nat"].reparsed == 1
        worker.call(proxier.sync, state, Changes(), True)  # a periodic resync rewrites the same bytes:
        state.endpoints[s0.name] = tuple(e0[:2])
        worker.call(proxier.sync, state, Changes(ports={s0.name}), False)
        assert proxier._xt["nat"].reparsed == 1  # ... so the index stays valid
        assert "10.244.0.2:8080" in "\n".join(_save(ns, "nat"))
        subprocess.run(["ip", "netns", "exec", ns, "iptables-legacy", "-t", "nat", "-F",
                        proxier.names.services],
                       check=True)
        state.services.pop(s1.name)  # its dispatch rule is gone already: the edit cannot apply
        with pytest.raises(BlobError):
            worker.call(proxier.sync, state, Changes(ports={s1.name}), False)
        worker.call(proxier.sync, state, Changes(), True)
        lines = _save(ns, "nat")
        assert [ln for ln in lines
                if ln.startswith(f"-A {proxier.names.services} ") and "default/s0:http cluster IP" in ln]
        assert "10.244.1." not in "\n".join(lines)
        state.endpoints[s0.name] = tuple(e0)
        worker.call(proxier.sync, state, Changes(ports={s0.name}), False)
        assert "10.244.0.3:8080" in "\n".join(_save(ns, "nat"))
        worker.call(proxier.cleanup)
        assert proxier.names.prefix not in "\n".join(_save(ns, "nat") + _save(ns, "filter"))
    finally:
        worker.close()


@pytest.mark.parametrize("incremental", ["libiptc", "xtblob"])
def test_changes_wait_for_the_xtables_lock(res, tmp_path, monkeypatch, incremental):
    """Like `iptables -w`, an in-process change waits while another writer holds the xtables lock."""
    import fcntl
    import os
    import threading

    from netproxy.iptables.proxier import IptablesProxier
    from netproxy.tracker import Changes, ProxyState

    lock = tmp_path / "xtables.lock"
    monkeypatch.setenv("XTABLES_LOCKFILE", str(lock))
    ns = res.netns()
    proxier = IptablesProxier(NodeConfig(node_name="me", prefix=f"L{ns[-6:]}-"), incremental=incremental)
    state = ProxyState()
    s0, e0 = _port(0)
    state.services[s0.name] = s0
    state.endpoints[s0.name] = tuple(e0)
    worker = NetnsWorker(ns)
    fd = os.open(lock, os.O_CREAT | os.O_RDWR)
    try:
        worker.call(proxier.sync, state, Changes(), True)
        state.endpoints[s0.name] = tuple(e0[:1])
        fcntl.flock(fd, fcntl.LOCK_EX)
        done = threading.Event()

        def sync_then_signal() -> None:
            proxier.sync(state, Changes(ports={s0.name}), False)
            done.set()

        future = worker.submit(sync_then_signal)
        assert not done.wait(0.5), "the change did not wait for the lock"
        fcntl.flock(fd, fcntl.LOCK_UN)
        future.result(timeout=30)
        assert "10.244.0.2:8080" not in "\n".join(_save(ns, "nat"))
        worker.call(proxier.cleanup)
    finally:
        os.close(fd)
        worker.close()
