"""kube-proxy's chain-name hash: sha256 → base32 → first 16 characters.

Identical names to kube-proxy's, so a person's `iptables-save | grep KUBE-SVC-...`
habits (and their notes from real clusters) carry over.
"""

from __future__ import annotations

import base64
import functools
import hashlib

from netproxy.model import Endpoint, ServicePortName


@functools.lru_cache(maxsize=1 << 17)
def hash16(data: str) -> str:
    """The first 16 base32 characters of sha256(data): base32 maps each 5 bytes to 8 characters,
    so encoding only the first 10 bytes gives the same prefix, much faster."""
    return base64.b32encode(hashlib.sha256(data.encode()).digest()[:10]).decode()


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
