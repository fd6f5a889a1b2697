"""Per-network masquerade: one chain per network, jumped from POSTROUTING once per subnet.

    -A POSTROUTING -s <subnet> -m comment --comment "nodeagent/masq net=<net> id=* if=*" -j NA-MASQ-<h>
    -A NA-MASQ-<h> -d <subnet> -j ACCEPT          (pod to pod stays unNATed)
    -A NA-MASQ-<h> ! -d 224.0.0.0/4 -j MASQUERADE

ADD makes sure it exists (a resident daemon remembers that for `ttl` seconds, so a
warm ADD execs no iptables at all); the DEL that removes the network's last veth
from the host removes the chain. Both run under a flock on the bridge's sysfs
directory, so concurrent plugins never duplicate or drop the rules.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import threading
import time

from cni import iptables
from cni.sha import sha256

TYPE_CHECKING = False  # typing is not imported at run time: the exec'd path stays lean
if TYPE_CHECKING:
    from collections.abc import Iterator

PREFIX = "NA-MASQ-"


def chain(network: str) -> str:
    return PREFIX + sha256(network.encode()).hexdigest()[:16]


def rules(network: str, subnets: list[str], v6: bool) -> list[str]:
    c = chain(network)
    t = f'-m comment --comment "{iptables.tag("masq", network, "*", "*")}"'
    out = [f"-A {c} -d {s} {t} -j ACCEPT" for s in subnets]
    out.append(f"-A {c} ! -d {'ff00::/8' if v6 else '224.0.0.0/4'} {t} -j MASQUERADE")
    out += [f"-A POSTROUTING -s {s} {t} -j {c}" for s in subnets]
    return out


@contextlib.contextmanager
def bridge_lock(bridge: str) -> Iterator[None]:
    """flock on /sys/class/net/<bridge>: serialises every plugin process and daemon thread on it."""
    try:
        fd = os.open(f"/sys/class/net/{bridge}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class Cache:
    """What a long-lived process already ensured: (backend, network, subnets, v6) -> monotonic time."""

    def __init__(self, ttl: float = 30.0) -> None:
        self.ttl = ttl
        self._seen: dict[tuple, float] = {}
        self._lock = threading.Lock()

    def fresh(self, key: tuple) -> bool:
        with self._lock:
            t = self._seen.get(key)
            return t is not None and time.monotonic() - t < self.ttl

    def mark(self, key: tuple) -> None:
        with self._lock:
            self._seen[key] = time.monotonic()

    def forget(self, be: str, network: str) -> None:
        with self._lock:
            for k in [k for k in self._seen if k[:2] == (be, network)]:
                del self._seen[k]


def split_subnets(cidrs: list[str]) -> dict[bool, list[str]]:
    out: dict[bool, list[str]] = {False: [], True: []}
    for c in cidrs:
        net = ipaddress.ip_interface(c).network
        if str(net) not in out[net.version == 6]:
            out[net.version == 6].append(str(net))
    return out


def ensure(be: str, network: str, cidrs: list[str], cache: Cache) -> None:
    """Make the network's masquerade rules exactly present (call under bridge_lock)."""
    for v6, subnets in split_subnets(cidrs).items():
        if not subnets:
            continue
        key = (be, network, tuple(subnets), v6)
        if cache.fresh(key):
            continue
        want = rules(network, subnets, v6)
        have = iptables.save(be, "nat", v6).splitlines()
        if all(line in have for line in want):
            cache.mark(key)
            continue
        c = chain(network)
        stale = [f"-D{ln[2:]}" for ln in have
                 if ln.startswith("-A POSTROUTING ") and ln.endswith(f"-j {c}")]
        iptables.restore(be, "nat", [*stale, f":{c} - [0:0]", *want], v6)
        cache.mark(key)


def missing(be: str, network: str, cidrs: list[str]) -> list[str]:
    """The network's masquerade rules for these addresses that are not in the kernel (for CHECK)."""
    out = []
    for v6, subnets in split_subnets(cidrs).items():
        if subnets:
            have = set(iptables.save(be, "nat", v6).splitlines())
            out += [ln for ln in rules(network, subnets, v6) if ln not in have]
    return out


def remove(be: str, network: str, cache: Cache) -> None:
    """Drop the network's chain and jumps, both families; already gone is fine."""
    cache.forget(be, network)
    c = chain(network)
    for v6 in (False, True):
        with contextlib.suppress(Exception):
            iptables.remove_tagged(be, "nat", "masq", lambda n, cid, ifn: n == network, (c,), v6)
