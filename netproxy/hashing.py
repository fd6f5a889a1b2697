"""kube-proxy's chain-name hash: sha256 → base32 → first 16 characters.

Identical names to kube-proxy's, so a person's `iptables-save | grep KUBE-SVC-...`
habits (and their notes from real clusters) carry over.
"""

from __future__ import annotations

import functools
import hashlib

from netproxy.model import Endpoint, ServicePortName

_B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_B32_PAIRS = [a + b for a in _B32 for b in _B32]  # 10 bits -> 2 characters


@functools.lru_cache(maxsize=1 << 17)
def hash16(data: str) -> str:
    """The first 16 base32 characters of sha256(data): base32 maps each 5 bytes to 8 characters,
    so encoding only the first 10 bytes (80 bits, 8 pairs of 10) gives the same prefix; done
    with a pair table because base64.b32encode is pure Python (and the planner's top cost)."""
    n = int.from_bytes(hashlib.sha256(data.encode()).digest()[:10], "big")
    p = _B32_PAIRS
    return (p[n >> 70] + p[(n >> 60) & 1023] + p[(n >> 50) & 1023] + p[(n >> 40) & 1023]
            + p[(n >> 30) & 1023] + p[(n >> 20) & 1023] + p[(n >> 10) & 1023] + p[n & 1023])


def port_proto_hash(spn: ServicePortName | str, protocol: str) -> str:
    return hash16(f"{spn}{protocol.lower()}")


def endpoint_hash(spn: ServicePortName | str, protocol: str, endpoint: Endpoint | str) -> str:
    return hash16(f"{spn}{protocol.lower()}{endpoint}")


def svc_chain(spn: ServicePortName, prefix: str = "KUBE-") -> str:
    return f"{prefix}SVC-{port_proto_hash(spn, spn.protocol)}"


def svl_chain(spn: ServicePortName, prefix: str = "KUBE-") -> str:
    return f"{prefix}SVL-{port_proto_hash(spn, spn.protocol)}"


def ext_chain(spn: ServicePortName, prefix: str = "KUBE-") -> str:
    return f"{prefix}EXT-{port_proto_hash(spn, spn.protocol)}"


def sep_chain(spn: ServicePortName, ep: Endpoint | str, prefix: str = "KUBE-") -> str:
    return f"{prefix}SEP-{endpoint_hash(spn, spn.protocol, ep)}"


def fw_chain(spn: ServicePortName, prefix: str = "KUBE-") -> str:
    """The loadBalancerSourceRanges chain of a LoadBalancer Service port."""
    return f"{prefix}FW-{port_proto_hash(spn, spn.protocol)}"
