"""What the netproxy benchmarks share (netproxy_sync.py, ipt_validate.py): the synthetic Services and their
endpoints, a scratch network namespace, and the kernel's floor for any nat change (one rule committed)."""

from __future__ import annotations

import os
import subprocess
import time

from kernel import nftables as nl
from nodeagent.testing.netproxy_lab import endpoint_slice, service


def vip(i: int) -> str:
    return f"10.96.{i // 250}.{i % 250 + 1}"


def ep(i: int, k: int) -> str:
    n = i * 3 + k
    return f"10.{100 + n // 62500}.{n // 250 % 250}.{n % 250 + 1}"


def objects(n: int, eps: int):
    ports = [{"name": "http", "port": 80, "protocol": "TCP"}]
    for i in range(n):
        yield (service(f"svc{i}", vip(i), ports, namespace=f"ns{i % 20}"),
               endpoint_slice(f"svc{i}", [{"name": "http", "port": 8080, "protocol": "TCP"}],
                              [{"ip": ep(i, k)} for k in range(eps)], namespace=f"ns{i % 20}"))


def netns() -> str:
    name = f"npbench{os.getpid()}{time.monotonic_ns() % 10000}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
    return name


def commit_one_rule(validate: bool) -> tuple[float, float]:
    """(wall, CPU) seconds of committing one new chain with one rule (counter [+ return verdict]): with the
    verdict, the kernel's floor for any nat change (netproxy_sync.py prints it beside the one-Service
    change)."""
    s = nl.NftSocket()
    try:
        b = nl.Batch("nat")
        b.add_chain("BENCH-X")
        b.add_rule("BENCH-X", nl.COUNTER + (nl.immediate_verdict(nl.RETURN) if validate else b""))
        w, c = time.perf_counter(), time.thread_time()
        s.send(b)
        out = time.perf_counter() - w, time.thread_time() - c
        b = nl.Batch("nat")
        b.flush_chain("BENCH-X")
        b.del_chain("BENCH-X")
        s.send(b)
        return out
    finally:
        s.close()
