"""Plans → netlink: the fixed skeleton of the table and each planned rule's expressions."""

from __future__ import annotations

import functools
import ipaddress
import struct

from kernel import nftables as nl
from netproxy.nftables.plan import (
    HAIRPIN,
    MARK_MASQ,
    MASQUERADING,
    MAX_PICKED,
    NO_EP_NODEPORTS,
    NO_EP_SERVICES,
    NO_LOCAL_NODEPORTS,
    NO_LOCAL_SERVICES,
    NODEPORT_ENDPOINTS,
    NODEPORTS,
    SERVICE_ENDPOINTS,
    SERVICE_IPS,
    SERVICE_NODEPORTS,
    SERVICES,
    ElemData,
    ElemKey,
    Rule,
    nodeport_pick_chain,
    pick_chain,
    picked_nodeport_set,
    picked_set,
)
from netproxy.proxier import NodeConfig

SVC_KEY_TYPE = (nl.TYPE_IPADDR << 12) | (nl.TYPE_INET_PROTOCOL << 6) | nl.TYPE_INET_SERVICE
NP_KEY_TYPE = (nl.TYPE_INET_PROTOCOL << 6) | nl.TYPE_INET_SERVICE
SERVICE_CHECK, NODEPORT_CHECK = "service-endpoints-check", "nodeport-endpoints-check"
HOOKS = {"prerouting": 0, "input": 1, "forward": 2, "output": 3, "postrouting": 4}
_SVC_TYPEOF = (nl.ud_payload(nl.UD_PROTO_IP, nl.UD_IP_DADDR), nl.ud_meta(nl.META_L4PROTO),
               nl.ud_payload(nl.UD_PROTO_TH, nl.UD_TH_DPORT))
ENDPOINTS_UDATA = nl.ud_typeof(nl.ud_concat(*_SVC_TYPEOF, nl.ud_numgen_random(1)),
                               nl.ud_concat(_SVC_TYPEOF[0], _SVC_TYPEOF[2]))
NODEPORT_ENDPOINTS_UDATA = nl.ud_typeof(nl.ud_concat(*_SVC_TYPEOF[1:], nl.ud_numgen_random(1)),
                                        nl.ud_concat(_SVC_TYPEOF[0], _SVC_TYPEOF[2]))
HAIRPIN_UDATA = nl.ud_typeof(nl.ud_concat(nl.ud_payload(nl.UD_PROTO_IP, nl.UD_IP_SADDR),
                                          nl.ud_payload(nl.UD_PROTO_IP, nl.UD_IP_DADDR)))
ENDPOINTS_KEY_TYPE = (SVC_KEY_TYPE << 6) | nl.TYPE_INTEGER
NODEPORT_ENDPOINTS_KEY_TYPE = (NP_KEY_TYPE << 6) | nl.TYPE_INTEGER
ENDPOINT_DATA_TYPE = (nl.TYPE_IPADDR << 6) | nl.TYPE_INET_SERVICE
HAIRPIN_KEY_TYPE = (nl.TYPE_IPADDR << 6) | nl.TYPE_IPADDR


def _saddr() -> bytes:
    return nl.payload(nl.REG_1, nl.PAYLOAD_NETWORK, 12, 4)


def _daddr() -> bytes:
    return nl.payload(nl.REG_1, nl.PAYLOAD_NETWORK, 16, 4)


def _cidr_match(cidr: str, op: int) -> bytes:
    net = ipaddress.ip_network(cidr, strict=False)
    return _saddr() + nl.bitwise(nl.REG_1, nl.REG_1, net.netmask.packed, b"\0\0\0\0") + \
        nl.cmp(nl.REG_1, op, net.network_address.packed)


def _svc_key_load() -> bytes:
    return _daddr() + nl.meta_load(nl.REG32_01, nl.META_L4PROTO) + \
        nl.payload(nl.REG32_02, nl.PAYLOAD_TRANSPORT, 2, 2)


def _np_key_load() -> bytes:
    return nl.meta_load(nl.REG_1, nl.META_L4PROTO) + nl.payload(nl.REG32_01, nl.PAYLOAD_TRANSPORT, 2, 2)


def _local_daddr() -> bytes:
    return nl.fib_addrtype(nl.REG_1, nl.FIB_F_DADDR) + nl.cmp(nl.REG_1, nl.CMP_EQ, nl.host_u32(nl.RTN_LOCAL))


def _mark_or(bit: int) -> bytes:
    return nl.meta_load(nl.REG_1, nl.META_MARK) + \
        nl.bitwise(nl.REG_1, nl.REG_1, nl.host_u32(~bit & 0xFFFFFFFF), nl.host_u32(bit)) + \
        nl.meta_set(nl.META_MARK, nl.REG_1)


def _pick_dnat(n: int) -> bytes:
    """dnat to ip daddr . meta l4proto . th dport . numgen random mod n map @service-endpoints"""
    return _svc_key_load() + nl.numgen(nl.REG32_03, n) + nl.lookup(SERVICE_ENDPOINTS, nl.REG_1, nl.REG_1) + \
        nl.dnat(nl.REG_1, nl.REG32_01)


def _nodeport_pick_dnat(n: int) -> bytes:
    """dnat to meta l4proto . th dport . numgen random mod n map @nodeport-endpoints"""
    return _np_key_load() + nl.numgen(nl.REG32_02, n) + nl.lookup(NODEPORT_ENDPOINTS, nl.REG_1, nl.REG_1) + \
        nl.dnat(nl.REG_1, nl.REG32_01)


def skeleton(b: nl.Batch, node: NodeConfig) -> None:
    """The table, its maps, the fixed chains and hooks (everything but per-Service state)."""
    bit = node.masq_mark
    b.add_set(SERVICE_IPS, 12, SVC_KEY_TYPE, nl.SET_MAP, data_verdict=True)
    b.add_set(SERVICE_NODEPORTS, 8, NP_KEY_TYPE, nl.SET_MAP, data_verdict=True)
    for name in (NO_EP_SERVICES, NO_LOCAL_SERVICES, *(picked_set(n) for n in range(1, MAX_PICKED + 1))):
        b.add_set(name, 12, SVC_KEY_TYPE)
    for name in (NO_EP_NODEPORTS, NO_LOCAL_NODEPORTS,
                 *(picked_nodeport_set(n) for n in range(1, MAX_PICKED + 1))):
        b.add_set(name, 8, NP_KEY_TYPE)
    b.add_set(SERVICE_ENDPOINTS, 16, ENDPOINTS_KEY_TYPE, nl.SET_MAP, data=(ENDPOINT_DATA_TYPE, 8),
              udata=ENDPOINTS_UDATA)
    b.add_set(NODEPORT_ENDPOINTS, 12, NODEPORT_ENDPOINTS_KEY_TYPE, nl.SET_MAP, data=(ENDPOINT_DATA_TYPE, 8),
              udata=NODEPORT_ENDPOINTS_UDATA)
    b.add_set(HAIRPIN, 8, HAIRPIN_KEY_TYPE, udata=HAIRPIN_UDATA)
    for name in (SERVICES, NODEPORTS, MARK_MASQ, MASQUERADING, SERVICE_CHECK, NODEPORT_CHECK):
        b.add_chain(name)
    b.add_chain("nat-prerouting", HOOKS["prerouting"], -100, "nat")
    b.add_chain("nat-output", HOOKS["output"], -100, "nat")
    b.add_chain("nat-postrouting", HOOKS["postrouting"], 100, "nat")
    b.add_chain("filter-input", HOOKS["input"], -110, "filter")
    b.add_chain("filter-forward", HOOKS["forward"], -110, "filter")
    b.add_chain("filter-output", HOOKS["output"], -110, "filter")
    masq = (nl.immediate_verdict(nl.JUMP, MARK_MASQ) if node.masquerade_all else
            _cidr_match(node.cluster_cidr, nl.CMP_NEQ) + nl.immediate_verdict(nl.JUMP, MARK_MASQ)
            if node.cluster_cidr else None)
    for n in range(1, MAX_PICKED + 1):
        b.add_chain(pick_chain(n))
        if masq:
            b.add_rule(pick_chain(n), masq)
        b.add_rule(pick_chain(n), _pick_dnat(n))
        b.add_chain(nodeport_pick_chain(n))  # external traffic under Cluster policy: always masqueraded
        b.add_rule(nodeport_pick_chain(n), nl.immediate_verdict(nl.JUMP, MARK_MASQ))
        b.add_rule(nodeport_pick_chain(n), _nodeport_pick_dnat(n))
    b.add_rule(SERVICES, _svc_key_load() + nl.lookup(SERVICE_IPS, nl.REG_1, nl.REG_VERDICT))
    for n in range(1, MAX_PICKED + 1):
        b.add_rule(SERVICES, _svc_key_load() + nl.lookup(picked_set(n), nl.REG_1) +
                   nl.immediate_verdict(nl.GOTO, pick_chain(n)))
    node_match = [nl.payload(nl.REG_1, nl.PAYLOAD_NETWORK, 16, 4) + nl.cmp(nl.REG_1, nl.CMP_EQ, nl.ip4(ip))
                  for ip in node.node_ips] or [_local_daddr()]
    for m in node_match:
        b.add_rule(SERVICES, m + nl.immediate_verdict(nl.JUMP, NODEPORTS))
    b.add_rule(NODEPORTS, _np_key_load() + nl.lookup(SERVICE_NODEPORTS, nl.REG_1, nl.REG_VERDICT))
    for n in range(1, MAX_PICKED + 1):
        b.add_rule(NODEPORTS, _np_key_load() + nl.lookup(picked_nodeport_set(n), nl.REG_1) +
                   nl.immediate_verdict(nl.GOTO, nodeport_pick_chain(n)))
    b.add_rule(MARK_MASQ, _mark_or(bit))
    hairpin = nl.ct_load(nl.REG_1, nl.CT_STATUS) + \
        nl.bitwise(nl.REG_1, nl.REG_1, nl.host_u32(nl.IPS_DST_NAT), nl.host_u32(0)) + \
        nl.cmp(nl.REG_1, nl.CMP_NEQ, nl.host_u32(0)) + _saddr() + \
        nl.payload(nl.REG32_01, nl.PAYLOAD_NETWORK, 16, 4) + nl.lookup(HAIRPIN, nl.REG_1)
    b.add_rule(MASQUERADING, hairpin + nl.masquerade())
    b.add_rule(MASQUERADING, nl.meta_load(nl.REG_1, nl.META_MARK) +
               nl.bitwise(nl.REG_1, nl.REG_1, nl.host_u32(bit), nl.host_u32(0)) +
               nl.cmp(nl.REG_1, nl.CMP_EQ, nl.host_u32(0)) + nl.immediate_verdict(nl.RETURN))
    b.add_rule(MASQUERADING, nl.meta_load(nl.REG_1, nl.META_MARK) +
               nl.bitwise(nl.REG_1, nl.REG_1, nl.host_u32(0xFFFFFFFF), nl.host_u32(bit)) +
               nl.meta_set(nl.META_MARK, nl.REG_1))
    b.add_rule(MASQUERADING, nl.masquerade())
    reject, drop = nl.reject_icmp_port_unreachable(), nl.immediate_verdict(nl.DROP)
    b.add_rule(SERVICE_CHECK, _svc_key_load() + nl.lookup(NO_EP_SERVICES, nl.REG_1) + reject)
    b.add_rule(SERVICE_CHECK, _svc_key_load() + nl.lookup(NO_LOCAL_SERVICES, nl.REG_1) + drop)
    for m in node_match:
        b.add_rule(NODEPORT_CHECK, m + _np_key_load() + nl.lookup(NO_EP_NODEPORTS, nl.REG_1) + reject)
        b.add_rule(NODEPORT_CHECK, m + _np_key_load() + nl.lookup(NO_LOCAL_NODEPORTS, nl.REG_1) + drop)
    ct_new = nl.ct_load(nl.REG_1, nl.CT_STATE) + \
        nl.bitwise(nl.REG_1, nl.REG_1, nl.host_u32(nl.CT_STATE_NEW), nl.host_u32(0)) + \
        nl.cmp(nl.REG_1, nl.CMP_NEQ, nl.host_u32(0))
    b.add_rule("nat-prerouting", nl.immediate_verdict(nl.JUMP, SERVICES))
    b.add_rule("nat-output", nl.immediate_verdict(nl.JUMP, SERVICES))
    b.add_rule("nat-postrouting", nl.immediate_verdict(nl.JUMP, MASQUERADING))
    b.add_rule("filter-input", ct_new + nl.immediate_verdict(nl.JUMP, NODEPORT_CHECK))
    b.add_rule("filter-input", ct_new + nl.immediate_verdict(nl.JUMP, SERVICE_CHECK))
    b.add_rule("filter-forward", ct_new + nl.immediate_verdict(nl.JUMP, SERVICE_CHECK))
    b.add_rule("filter-output", ct_new + nl.immediate_verdict(nl.JUMP, SERVICE_CHECK))


def add_rule(b: nl.Batch, chain: str, rule: Rule) -> None:
    b.add_rule(chain, rule_exprs(rule))


@functools.lru_cache(maxsize=1 << 17)
def rule_exprs(rule: Rule) -> bytes:
    """The expressions of one rule; cached, since resyncs repeat the same rules."""
    out = _Out()
    _encode(out, rule)
    return out.data


class _Out:
    def __init__(self) -> None:
        self.data = b""

    def add_rule(self, _chain: str, data: bytes) -> None:
        self.data = data


def _encode(b: _Out, rule: Rule) -> None:
    chain = ""
    kind = rule[0]
    if kind == "jump":
        b.add_rule(chain, nl.immediate_verdict(nl.JUMP, rule[1]))
    elif kind == "numgen_goto":
        _, n, target = rule
        b.add_rule(chain, nl.numgen(nl.REG_1, n) + nl.cmp(nl.REG_1, nl.CMP_EQ, nl.host_u32(0)) +
                   nl.immediate_verdict(nl.GOTO, target))
    elif kind == "goto":
        b.add_rule(chain, nl.immediate_verdict(nl.GOTO, rule[1]))
    elif kind == "drop":
        b.add_rule(chain, nl.immediate_verdict(nl.DROP))
    elif kind == "svc_masq":
        _, vip, proto, port, cidr = rule
        e = (_daddr() + nl.cmp(nl.REG_1, nl.CMP_EQ, nl.ip4(vip))
             + nl.meta_load(nl.REG_1, nl.META_L4PROTO)
             + nl.cmp(nl.REG_1, nl.CMP_EQ, bytes([nl.PROTO_NUM[proto]]))
             + nl.payload(nl.REG_1, nl.PAYLOAD_TRANSPORT, 2, 2)
             + nl.cmp(nl.REG_1, nl.CMP_EQ, struct.pack(">H", port)))
        if cidr:
            e += _cidr_match(cidr, nl.CMP_NEQ)
        b.add_rule(chain, e + nl.immediate_verdict(nl.JUMP, MARK_MASQ))
    elif kind == "affinity_check":
        b.add_rule(chain, _saddr() + nl.lookup(rule[1], nl.REG_1) + nl.immediate_verdict(nl.GOTO, rule[2]))
    elif kind == "saddr_jump":
        b.add_rule(chain, _saddr() + nl.cmp(nl.REG_1, nl.CMP_EQ, nl.ip4(rule[1])) +
                   nl.immediate_verdict(nl.JUMP, rule[2]))
    elif kind == "saddr_goto":
        b.add_rule(chain, _cidr_match(rule[1], nl.CMP_EQ) + nl.immediate_verdict(nl.GOTO, rule[2]))
    elif kind == "fib_saddr_local":
        code = nl.JUMP if rule[1] == "jump" else nl.GOTO
        b.add_rule(chain, nl.fib_addrtype(nl.REG_1, nl.FIB_F_SADDR) +
                   nl.cmp(nl.REG_1, nl.CMP_EQ, nl.host_u32(nl.RTN_LOCAL)) +
                   nl.immediate_verdict(code, rule[2]))
    elif kind == "affinity_update":
        b.add_rule(chain, _saddr() + nl.dynset_update(rule[1], nl.REG_1))
    elif kind == "dnat":
        _, proto, ip, port = rule
        b.add_rule(chain, nl.meta_load(nl.REG_1, nl.META_L4PROTO) +
                   nl.cmp(nl.REG_1, nl.CMP_EQ, bytes([nl.PROTO_NUM[proto]])) +
                   nl.immediate_data(nl.REG_1, nl.ip4(ip)) +
                   nl.immediate_data(nl.REG_2, struct.pack(">H", port)) +
                   nl.dnat(nl.REG_1, nl.REG_2))
    else:
        raise ValueError(f"unknown rule kind {kind!r}")


def add_affinity_set(b: nl.Batch, name: str, timeout: int) -> None:
    b.add_set(name, 4, nl.TYPE_IPADDR, nl.SET_TIMEOUT | nl.SET_EVAL, timeout_ms=timeout * 1000)


def elem_key(key: ElemKey) -> bytes:
    if key[0] == HAIRPIN:
        return nl.ip4(key[1]) * 2
    ip, proto, port = key[1:4]
    out = (nl.ip4(ip) if ip else b"") + nl.proto_key(proto) + nl.port_key(port)
    return out + nl.host_u32(key[4]) if len(key) == 5 else out  # endpoint maps: + numgen slot


def elem(key: ElemKey, data: ElemData, with_data: bool = True) -> bytes:
    """One set/map element; `with_data=False` for deletions (the key alone)."""
    if data is None or not with_data:
        return nl.element(elem_key(key))
    if key[0] in (SERVICE_ENDPOINTS, NODEPORT_ENDPOINTS):
        return nl.element(elem_key(key), data=nl.ip4(data[0]) + nl.port_key(data[1]))
    code = nl.GOTO if data[0] == "goto" else nl.DROP
    return nl.element(elem_key(key), (code, data[1]))
