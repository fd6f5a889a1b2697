"""kube-proxy's chain-name hash: sha256 → base32 → first 16 characters.

Identical names to kube-proxy's, so a person's `iptables-save | grep KUBE-SVC-...`
habits (and their notes from real clusters) carry over.
"""

from __future__ import annotations

import base64
import hashlib

from netproxy.model import Endpoint, ServicePortName


def port_proto_hash(spn: ServicePortName | str, protocol: str) -> str:
    data = f"{spn}{protocol.lower()}".encode()
    return base64.b32encode(hashlib.sha256(data).digest()).decode()[:16]


def endpoint_hash(spn: ServicePortName | str, protocol: str, endpoint: Endpoint | str) -> str:
    data = f"{spn}{protocol.lower()}{endpoint}".encode()
    return base64.b32encode(hashlib.sha256(data).digest()).decode()[:16]


def svc_chain(spn: ServicePortName, prefix: str = "KUBE-") -> str:
    return f"{prefix}SVC-{port_proto_hash(spn, spn.protocol)}"


def svl_chain(spn: ServicePortName, prefix: str = "KUBE-") -> str:
    return f"{prefix}SVL-{port_proto_hash(spn, spn.protocol)}"


def ext_chain(spn: ServicePortName, prefix: str = "KUBE-") -> str:
    return f"{prefix}EXT-{port_proto_hash(spn, spn.protocol)}"


def sep_chain(spn: ServicePortName, ep: Endpoint | str, prefix: str = "KUBE-") -> str:
    return f"{prefix}SEP-{endpoint_hash(spn, spn.protocol, ep)}"
