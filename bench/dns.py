#!/usr/bin/env python3
"""Cluster DNS: queries/s and latency of `nodeagent dns` vs dnsmasq answering the same names, same run.

A real `nodeagent server` (memory store) gets --services ClusterIP Services; `nodeagent dns` answers
`<svc>.bench.svc.cluster.local` from its informers, and dnsmasq (Debian's dnsmasq-base, --no-resolv,
--addn-hosts) answers the same names from a hosts file: the forwarder-only baseline. Both listen on
127.0.0.1. The load generator is one Python process per --clients, each keeping --window queries
in flight over one UDP socket (closed loop), cycling through the names after a warm-up pass
(cache-hot). Latency is also measured with one query in flight. The two servers are measured
alternately, --rounds times, so load drift on a shared machine hits both alike.
Run: .venv/bin/python bench/dns.py [--services 200] [--seconds 4] [--window 32] [--clients 1]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import re
import selectors
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# this file is named dns.py: keep its folder off the path so `import dns` finds dnspython
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

import dns.message  # noqa: E402
import dns.query  # noqa: E402

from bench.report import add_plot_argument, pct, plot_bars  # noqa: E402
from nodeagent.testing.apiserver import start_server  # noqa: E402


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u, socket.socket() as t:
        t.bind(("127.0.0.1", 0))
        port = t.getsockname()[1]
        u.bind(("127.0.0.1", port))
        return port


def load(port: int, wires: list[bytes], seconds: float, window: int, out: mp.Queue) -> None:
    """Closed loop: `window` queries in flight; returns (answered, lost, latencies)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(s, selectors.EVENT_READ)
    sent: dict[int, float] = {}
    lat: list[float] = []
    qid = random.randrange(65536)
    i = lost = 0
    end = time.perf_counter() + seconds

    def send_one() -> None:
        nonlocal qid, i
        qid = (qid + 1) & 0xFFFF
        w = wires[i % len(wires)]
        i += 1
        sent[qid] = time.perf_counter()
        s.send(struct.pack("!H", qid) + w[2:])

    for _ in range(window):
        send_one()
    while time.perf_counter() < end:
        events = sel.select(timeout=0.5)
        if not events:  # a lost datagram: count it and refill the window
            lost += len(sent)
            sent.clear()
            for _ in range(window):
                send_one()
            continue
        while True:
            try:
                data = s.recv(4096)
            except BlockingIOError:
                break
            t0 = sent.pop(struct.unpack("!H", data[:2])[0], None)
            if t0 is not None:
                lat.append(time.perf_counter() - t0)
                send_one()
    out.put((len(lat), lost, lat))


def measure(port: int, wires: list[bytes], seconds: float, window: int, clients: int) -> dict[str, float]:
    q: mp.Queue = mp.Queue()
    procs = [mp.Process(target=load, args=(port, wires, seconds, window, q)) for _ in range(clients)]
    for p in procs:
        p.start()
    results = [q.get() for _ in procs]
    for p in procs:
        p.join()
    n = sum(r[0] for r in results)
    lat = [x for r in results for x in r[2]]
    return {"qps": n / seconds, "p50": pct(lat, 0.5) * 1e3, "p99": pct(lat, 0.99) * 1e3,
            "lost": sum(r[1] for r in results)}


def start_nodeagent_dns(kubeconfig: Path, log: Path) -> tuple[subprocess.Popen, int]:
    f = open(log, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "nodeagent", "--log-level", "warning", "dns",
                             "--kubeconfig", str(kubeconfig), "--listen", "127.0.0.1:0",
                             "--upstream", "127.0.0.1:9"], stdout=f, stderr=subprocess.STDOUT)
    f.close()
    # --log-level warning hides the "serving on" line: find the port from the process's sockets
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        out = subprocess.run(["ss", "-Hlunp"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if f"pid={proc.pid}," in line:
                m = re.search(r"127\.0\.0\.1:(\d+)", line)
                if m:
                    return proc, int(m.group(1))
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("nodeagent dns did not start:\n" + log.read_text())


def start_dnsmasq(hosts: Path, port: int, log: Path) -> subprocess.Popen:
    exe = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"
    f = open(log, "wb")
    proc = subprocess.Popen([exe, "--no-daemon", "--no-resolv", "--no-hosts", f"--addn-hosts={hosts}",
                             "--conf-file=/dev/null", "--listen-address=127.0.0.1", "--bind-interfaces",
                             f"--port={port}", "--cache-size=10000", "--pid-file=", "--local-ttl=30",
                             "--dns-forward-max=1000"], stdout=f, stderr=subprocess.STDOUT)
    f.close()
    return proc


def wait_answers(port: int, name: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            r = dns.query.udp(dns.message.make_query(name, "A"), "127.0.0.1", port=port, timeout=0.5)
            if r.answer:
                return
        except Exception:
            pass
        time.sleep(0.1)
    raise SystemExit(f"no answer for {name} on port {port}")


def handler_costs(names: dict[str, str], wires: list[bytes]) -> None:
    """The in-process cost per question, without sockets: cold (resolve + wire) and cache-hot."""
    from nodeagent.dns.records import ClusterRecords, dict_lister
    from nodeagent.dns.server import Handler
    from nodeagent.testing.dns_objects import namespace, service

    objs = {"namespaces": [namespace("bench")],
            "services": [service(n.split(".")[0], "bench", ip) for n, ip in names.items()]}
    records = ClusterRecords(dict_lister(objs))
    h = Handler(records, None)
    rounds = max(1, 20000 // len(wires))
    t0 = time.perf_counter()
    for _ in range(rounds):
        records.generation += 1  # drop the wire cache every pass: every answer is built
        for w in wires:
            h.handle(w, True)
    cold = (time.perf_counter() - t0) / (rounds * len(wires))
    t0 = time.perf_counter()
    for _ in range(rounds):
        for w in wires:
            h.handle(w, True)
    hot = (time.perf_counter() - t0) / (rounds * len(wires))
    print(f"\nin-process Handler.handle per question: built {cold * 1e6:.1f} us, "
          f"cache-hot {hot * 1e6:.2f} us")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, default=200, help="Services (names) to create (default 200)")
    ap.add_argument("--seconds", type=float, default=4.0, help="seconds per measurement (default 4)")
    ap.add_argument("--window", type=int, default=32, help="queries in flight per client (default 32)")
    ap.add_argument("--clients", type=int, default=1, help="load-generator processes (default 1)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds per server (default 2)")
    add_plot_argument(ap)
    args = ap.parse_args()
    if not (shutil.which("dnsmasq") or os.path.exists("/usr/sbin/dnsmasq")):
        raise SystemExit("dnsmasq not found: apt-get install dnsmasq-base (make install does)")

    tmp = Path(tempfile.mkdtemp(prefix="bench-dns-"))
    srv = start_server(tmp / "server")
    procs: list[subprocess.Popen] = []
    try:
        import asyncio

        from nodeagent.client.rest import Client

        async def populate() -> dict[str, str]:
            async with Client(srv.url, srv.token, ca_file=str(srv.ca_file)) as c:
                await c.create("namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": "bench"}})
                sem = asyncio.Semaphore(16)

                async def one(i: int) -> tuple[str, str]:
                    async with sem:
                        svc = {"apiVersion": "v1", "kind": "Service",
                               "metadata": {"name": f"svc-{i}", "namespace": "bench"},
                               "spec": {"ports": [{"name": "http", "port": 80}]}}
                        s = await c.create("services", svc, "bench")
                    return f"svc-{i}.bench.svc.cluster.local", s["spec"]["clusterIP"]

                return dict(await asyncio.gather(*(one(i) for i in range(args.services))))

        t0 = time.perf_counter()
        names = asyncio.run(populate())
        print(f"created {len(names)} Services in {time.perf_counter() - t0:.1f}s")
        hosts = tmp / "hosts"
        hosts.write_text("".join(f"{ip} {name}\n" for name, ip in names.items()))

        ours, ours_port = start_nodeagent_dns(srv.kubeconfig, tmp / "dns.log")
        procs.append(ours)
        dm_port = free_port()
        dm = start_dnsmasq(hosts, dm_port, tmp / "dnsmasq.log")
        procs.append(dm)
        last = list(names)[-1]
        wait_answers(ours_port, last)
        wait_answers(dm_port, last)
        # both must give the same answers
        for name in random.sample(list(names), min(20, len(names))):
            a = dns.query.udp(dns.message.make_query(name, "A"), "127.0.0.1", port=ours_port, timeout=2)
            b = dns.query.udp(dns.message.make_query(name, "A"), "127.0.0.1", port=dm_port, timeout=2)
            answers = [r.to_text() for r in a.answer[0]]
            assert answers == [r.to_text() for r in b.answer[0]] == [names[name]], name
        wires = [dns.message.make_query(n, "A", use_edns=False).to_wire() for n in names]
        servers = {"nodeagent dns": ours_port, "dnsmasq": dm_port}
        for port in servers.values():  # warm-up: every name once (cache-hot afterwards)
            measure(port, wires, min(1.0, args.seconds), 1, 1)

        results: dict[str, dict[str, list[dict[str, float]]]] = {s: {"load": [], "single": []}
                                                                  for s in servers}
        for _ in range(args.rounds):
            for sname, port in servers.items():
                results[sname]["load"].append(measure(port, wires, args.seconds, args.window, args.clients))
                results[sname]["single"].append(measure(port, wires, args.seconds / 2, 1, 1))

        print(f"\n{len(names)} cluster names, cache-hot, UDP on 127.0.0.1; {args.rounds} alternating rounds; "
              f"shared 2-core machine (other jobs running: figures are indicative)")
        print(f"{'server':<15} {'mode':<26} {'queries/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'lost':>6}")
        bars: dict[str, dict[str, float]] = {}
        for sname in servers:
            for mode, label in (("load", f"{args.clients}x{args.window} in flight"),
                                ("single", "1 in flight")):
                rs = results[sname][mode]
                print(f"{sname:<15} {label:<26} {statistics.median(r['qps'] for r in rs):>10.0f} "
                      f"{statistics.median(r['p50'] for r in rs):>8.3f} "
                      f"{statistics.median(r['p99'] for r in rs):>8.3f} "
                      f"{sum(int(r['lost']) for r in rs):>6}")
                bars.setdefault(label, {})[sname] = statistics.median(r["qps"] for r in rs)
        if args.plot:
            plot_bars(args.plot, bars, f"{len(names)} cluster names, cache-hot, UDP (median of rounds)",
                      "queries/s")
            print(f"plot: {args.plot}")
        handler_costs(names, wires)
        return 0
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        srv.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
