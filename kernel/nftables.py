"""A minimal nf_tables netlink encoder and batch sender (no nft CLI, no ruleset re-read).

The nft 1.0.x CLI fetches the whole ruleset on every call, which makes one
element add cost ~140 ms at 5k Services; a hand-built nfnetlink batch costs what
the kernel costs. Only what our rule writers need is here (netproxy's nftables mode,
its iptables mode on nf_tables, netpol's nftables backend): tables, chains, rules from
a handful of expressions, named/anonymous sets and maps, and their elements.
Every batch is one transaction (BATCH_BEGIN … BATCH_END in one sendmsg).

One module on purpose, though over 600 lines: it is one wire protocol, and its writers and tests
use it as one namespace (`from kernel import nftables as nl`; nl.Batch, nl.lookup, nl.NftSocket,
nl.RULE_HANDLE, ... about a hundred names). Its parts follow the wire: constants, attribute and
key encodings, expressions, the batch, the socket that sends it and reads replies back. Cut into
modules, that namespace would be re-exported name by name, or each writer would import from three.
"""

from __future__ import annotations

import array
import bisect
import errno
import functools
import itertools
import os
import select
import socket
import struct
from collections.abc import Callable, Iterable
from typing import TypeVar

from kernel.errors import KernelError

# netlink / nfnetlink
NETLINK_NETFILTER = 12
NLM_F_REQUEST, NLM_F_ACK, NLM_F_REPLACE = 1, 4, 0x100
NLM_F_EXCL, NLM_F_CREATE, NLM_F_APPEND = 0x200, 0x400, 0x800
NLMSG_ERROR, NLMSG_DONE = 2, 3
NFNL_MSG_BATCH_BEGIN, NFNL_MSG_BATCH_END = 0x10, 0x11
NFNL_SUBSYS_NFTABLES = 10
NLA_F_NESTED = 0x8000
NFPROTO_IPV4 = 2
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33
REPLY_TIMEOUT = 60.0  # seconds; replies are queued before sendmsg returns, so any wait is a lost reply

# nf_tables messages
NEWTABLE, DELTABLE, NEWCHAIN, DELCHAIN, NEWRULE, DELRULE = 0, 2, 3, 5, 6, 8
NEWSET, DELSET, NEWSETELEM, DELSETELEM = 9, 11, 12, 14

# attributes
TABLE_NAME = 1
CHAIN_TABLE, CHAIN_NAME, CHAIN_HOOK, CHAIN_POLICY, CHAIN_TYPE = 1, 3, 4, 5, 7
HOOK_HOOKNUM, HOOK_PRIORITY = 1, 2
RULE_TABLE, RULE_CHAIN, RULE_HANDLE, RULE_EXPRESSIONS, RULE_COMPAT, RULE_POSITION = 1, 2, 3, 4, 5, 6
RULE_COMPAT_PROTO, RULE_COMPAT_FLAGS = 1, 2
GETTABLE, GETCHAIN, GETRULE = 1, 4, 7
NLM_F_ECHO, NLM_F_DUMP = 8, 0x300
LIST_ELEM = 1
EXPR_NAME, EXPR_DATA = 1, 2
SET_TABLE, SET_NAME, SET_FLAGS, SET_KEY_TYPE, SET_KEY_LEN, SET_DATA_TYPE, SET_DATA_LEN = 1, 2, 3, 4, 5, 6, 7
SET_DESC, SET_ID, SET_TIMEOUT, SET_USERDATA = 9, 10, 11, 13
SET_DESC_SIZE, SET_DESC_CONCAT, SET_FIELD_LEN = 1, 2, 1
ELEM_LIST_TABLE, ELEM_LIST_SET, ELEM_LIST_ELEMENTS, ELEM_LIST_SET_ID = 1, 2, 3, 4
ELEM_KEY, ELEM_DATA = 1, 2
DATA_VALUE, DATA_VERDICT = 1, 2
VERDICT_CODE, VERDICT_CHAIN = 1, 2

SET_ANONYMOUS, SET_CONSTANT, SET_INTERVAL, SET_MAP, SET_TIMEOUT, SET_EVAL = 0x1, 0x2, 0x4, 0x8, 0x10, 0x20
DATA_TYPE_VERDICT = 0xFFFFFF00

# verdicts
DROP, ACCEPT, CONTINUE, BREAK, JUMP, GOTO, RETURN = 0, 1, -1, -2, -3, -4, -5

# registers
REG_VERDICT, REG_1, REG_2 = 0, 1, 2
REG32_00, REG32_01, REG32_02, REG32_03 = 8, 9, 10, 11

# expression constants
PAYLOAD_NETWORK, PAYLOAD_TRANSPORT = 1, 2
META_MARK, META_L4PROTO = 3, 16
CMP_EQ, CMP_NEQ = 0, 1
NG_RANDOM = 1
NAT_DNAT = 1
CT_STATE, CT_STATUS = 0, 2
IPS_DST_NAT = 1 << 5
CT_STATE_NEW = 1 << 3
FIB_RESULT_ADDRTYPE, FIB_F_SADDR, FIB_F_DADDR = 3, 1, 2
RTN_LOCAL = 2
DYNSET_OP_UPDATE = 1
NAT_RANGE_PROTO_RANDOM_FULLY = 16

# nft userspace datatypes (for `nft list` to print keys nicely)
TYPE_VERDICT, TYPE_INTEGER, TYPE_IPADDR, TYPE_INET_PROTOCOL, TYPE_INET_SERVICE = 1, 4, 7, 12, 13
UDATA_SET_KEYBYTEORDER = 0
BYTEORDER_HOST, BYTEORDER_BIG = 1, 2
# nft's `typeof` set userdata (libnftnl udata TLVs: u8 type, u8 length, value; integers host-endian):
# SET_KEYBYTEORDER 0, SET_DATABYTEORDER 1, SET_KEY_TYPEOF 3, SET_DATA_TYPEOF 4, SET_DATA_INTERVAL 6;
# an expression is {0: kind, 1: its fields}; kinds as nft numbers them (payload 7, meta 9, concat 13,
# numgen 23)
UD_KEYBYTEORDER, UD_DATABYTEORDER, UD_KEY_TYPEOF, UD_DATA_TYPEOF, UD_DATA_INTERVAL = 0, 1, 3, 4, 6
UD_EXPR_PAYLOAD, UD_EXPR_META, UD_EXPR_CONCAT, UD_EXPR_NUMGEN = 7, 9, 13, 23
UD_PROTO_IP, UD_PROTO_TH, UD_IP_SADDR, UD_IP_DADDR, UD_TH_DPORT = 12, 11, 11, 12, 2


T = TypeVar("T")


class NftError(KernelError):
    """The kernel refused an nf_tables batch or dump (errno is its answer)."""


# -- attribute encoding ------------------------------------------------------------------------------
_hdr = struct.Struct("=HH").pack
_PAD = (b"", b"\0\0\0", b"\0\0", b"\0")


def attr(t: int, payload: bytes) -> bytes:
    n = 4 + len(payload)
    return _hdr(n, t) + payload + _PAD[n & 3]


def nest(t: int, *parts: bytes) -> bytes:
    payload = b"".join(parts)
    return _hdr(4 + len(payload), t | NLA_F_NESTED) + payload  # nested payloads are already aligned


_be32 = struct.Struct(">I").pack
_nlhdr = struct.Struct("=IHHII").pack


def u32(t: int, v: int) -> bytes:
    return _hdr(8, t) + _be32(v & 0xFFFFFFFF)


def i32(t: int, v: int) -> bytes:
    return attr(t, struct.pack(">i", v))


def u64(t: int, v: int) -> bytes:
    return attr(t, struct.pack(">Q", v))


@functools.lru_cache(maxsize=1 << 18)
def s(t: int, text: str) -> bytes:
    payload = text.encode() + b"\0"
    n = 4 + len(payload)
    return _hdr(n, t) + payload + _PAD[n & 3]


def value(t: int, data: bytes) -> bytes:
    return nest(t, attr(DATA_VALUE, data))


def verdict_data(t: int, code: int, chain: str | None = None) -> bytes:
    inner = i32(VERDICT_CODE, code) + (s(VERDICT_CHAIN, chain) if chain else b"")
    return nest(t, nest(DATA_VERDICT, inner))


# -- key encodings (register-aligned, as nft lays out concatenations) -------------------------------
PROTO_NUM = {"TCP": 6, "UDP": 17, "SCTP": 132}


def ip4(addr: str) -> bytes:
    return socket.inet_aton(addr)


def proto_key(proto: str) -> bytes:
    return bytes([PROTO_NUM[proto]]) + b"\0\0\0"


def port_key(port: int) -> bytes:
    return struct.pack(">H", port) + b"\0\0"


def host_u32(v: int) -> bytes:
    return struct.pack("=I", v)


# -- nft `typeof` userdata (so `nft list` prints `typeof ip daddr . … : …` and nft -f reads it back) ----
def _ud(t: int, v: bytes) -> bytes:
    return bytes([t, len(v)]) + v


def _ud32(t: int, n: int) -> bytes:
    return _ud(t, struct.pack("=I", n))


def ud_payload(proto: int, field: int) -> bytes:
    return _ud32(0, UD_EXPR_PAYLOAD) + _ud(1, _ud32(0, proto) + _ud32(1, field))


def ud_meta(key: int) -> bytes:
    return _ud32(0, UD_EXPR_META) + _ud(1, _ud32(0, key))


def ud_numgen_random(modulus: int) -> bytes:
    return _ud32(0, UD_EXPR_NUMGEN) + _ud(1, _ud32(0, NG_RANDOM) + _ud32(1, modulus) + _ud32(2, 0))


def ud_concat(*exprs: bytes) -> bytes:
    return _ud32(0, UD_EXPR_CONCAT) + _ud(1, b"".join(_ud(i, e) for i, e in enumerate(exprs)))


def ud_typeof(key: bytes, data: bytes | None = None) -> bytes:
    """Set userdata naming the key (and map data) expressions, as nft 1.0 writes it."""
    out = _ud32(UD_KEYBYTEORDER, 0)
    if data is not None:
        out += _ud32(UD_DATABYTEORDER, 0)
    out += _ud(UD_KEY_TYPEOF, key)
    if data is not None:
        out += _ud(UD_DATA_TYPEOF, data) + _ud32(UD_DATA_INTERVAL, 0)
    return out


# -- expressions -------------------------------------------------------------------------------------
def expr(name: str, *parts: bytes) -> bytes:
    return nest(LIST_ELEM, s(EXPR_NAME, name), nest(EXPR_DATA, *parts))


@functools.lru_cache(maxsize=1 << 16)
def payload(dreg: int, base: int, offset: int, length: int) -> bytes:
    return expr("payload", u32(1, dreg), u32(2, base), u32(3, offset), u32(4, length))


@functools.lru_cache(maxsize=1 << 16)
def meta_load(dreg: int, key: int) -> bytes:
    return expr("meta", u32(1, dreg), u32(2, key))


@functools.lru_cache(maxsize=1 << 16)
def meta_set(key: int, sreg: int) -> bytes:
    return expr("meta", u32(2, key), u32(3, sreg))


@functools.lru_cache(maxsize=1 << 16)
def cmp(sreg: int, op: int, data: bytes) -> bytes:
    return expr("cmp", u32(1, sreg), u32(2, op), value(3, data))


@functools.lru_cache(maxsize=1 << 16)
def bitwise(sreg: int, dreg: int, mask: bytes, xor: bytes) -> bytes:
    return expr("bitwise", u32(1, sreg), u32(2, dreg), u32(3, len(mask)), value(4, mask), value(5, xor))


@functools.lru_cache(maxsize=1 << 16)
def immediate_verdict(code: int, chain: str | None = None) -> bytes:
    return expr("immediate", u32(1, REG_VERDICT), verdict_data(2, code, chain))


@functools.lru_cache(maxsize=1 << 16)
def immediate_data(dreg: int, data: bytes) -> bytes:
    return expr("immediate", u32(1, dreg), value(2, data))


@functools.lru_cache(maxsize=1 << 16)
def lookup(set_name: str, sreg: int, dreg: int | None = None, set_id: int | None = None) -> bytes:
    parts = [s(1, set_name), u32(2, sreg)]
    if dreg is not None:
        parts.append(u32(3, dreg))
    if set_id is not None:
        parts.append(u32(4, set_id))
    return expr("lookup", *parts)


@functools.lru_cache(maxsize=1 << 16)
def numgen(dreg: int, modulus: int, offset: int = 0) -> bytes:
    return expr("numgen", u32(1, dreg), u32(2, modulus), u32(3, NG_RANDOM),
                *([u32(4, offset)] if offset else []))


@functools.lru_cache(maxsize=1 << 16)
def dnat(reg_addr: int, reg_port: int) -> bytes:
    return expr("nat", u32(1, NAT_DNAT), u32(2, NFPROTO_IPV4), u32(3, reg_addr), u32(5, reg_port))


def masquerade(flags: int = NAT_RANGE_PROTO_RANDOM_FULLY) -> bytes:
    return expr("masq", u32(1, flags))


def reject_icmp_port_unreachable() -> bytes:
    return expr("reject", u32(1, 0), attr(2, b"\x03"))


@functools.lru_cache(maxsize=1 << 16)
def fib_addrtype(dreg: int, flags: int) -> bytes:
    return expr("fib", u32(1, dreg), u32(2, FIB_RESULT_ADDRTYPE), u32(3, flags))


@functools.lru_cache(maxsize=1 << 16)
def ct_load(dreg: int, key: int) -> bytes:
    return expr("ct", u32(1, dreg), u32(2, key))


@functools.lru_cache(maxsize=1 << 16)
def dynset_update(set_name: str, sreg_key: int) -> bytes:
    return expr("dynset", s(1, set_name), u32(3, DYNSET_OP_UPDATE), u32(4, sreg_key))


def counter() -> bytes:
    return expr("counter", u64(1, 0), u64(2, 0))


COUNTER = counter()


@functools.lru_cache(maxsize=1 << 12)
def xt_match(name: str, rev: int, info: bytes) -> bytes:
    """An x_tables match run by nft_compat (NFTA_MATCH_NAME/REV/INFO); `info` is the xt_* struct, padded."""
    return expr("match", s(1, name), u32(2, rev), attr(3, info))


@functools.lru_cache(maxsize=1 << 12)
def xt_target(name: str, rev: int, info: bytes) -> bytes:
    """An x_tables target run by nft_compat (NFTA_TARGET_NAME/REV/INFO)."""
    return expr("target", s(1, name), u32(2, rev), attr(3, info))


# -- batches -----------------------------------------------------------------------------------------
_NEWRULE = (NFNL_SUBSYS_NFTABLES << 8) | NEWRULE


_APPEND = NLM_F_CREATE | NLM_F_APPEND
_EXPRS_NESTED = RULE_EXPRESSIONS | NLA_F_NESTED


@functools.lru_cache(maxsize=1024)  # a chain's rules are added together: a small LRU suffices
def _rule_head(table: str, chain: str) -> bytes:
    return s(RULE_TABLE, table) + _name_attr(RULE_CHAIN, chain)


def _name_attr(t: int, name: str) -> bytes:
    """A NUL-terminated string attribute (chain names: mostly new ones, so not through `s`'s LRU)."""
    raw = name.encode()
    n = 5 + len(raw)
    return _hdr(n, t) + raw + _NUL_PAD[n & 3]


_NUL_PAD = (b"\0", b"\0\0\0\0", b"\0\0\0", b"\0\0")  # the NUL, then padding to 4 (by 4 + len + 1)


class _Messages:
    """The batch's messages as (type, flags, attrs), read back from its buffer (error reports)."""

    def __init__(self, batch: Batch) -> None:
        self.batch = batch

    def __len__(self) -> int:
        return len(self.batch.offsets)

    def __getitem__(self, i: int) -> tuple[int, int, bytes]:
        buf, off = self.batch.locate(self.batch.offsets[i])
        length, mtype, flags = struct.unpack_from("=IHH", buf, off)
        return mtype, flags & ~(NLM_F_REQUEST | NLM_F_ACK), bytes(buf[off + 20:off + length])


_SEGMENT = 1 << 20  # bytes per buffer segment of a batch: growing one 40 MB bytearray copies it ~20 times


class Batch:
    """nf_tables messages for one transaction, in order, encoded as they are added into buffer
    segments of ~1 MiB (message i carries sequence number i + 1; a message never spans two
    segments; they go out as one sendmsg's iovec): a 100k-rule sync holds a few dozen bytearrays, not
    100k small objects that would fragment the heap after they are freed, and never copies a 40 MB
    buffer to grow it. `offsets` are message offsets in the concatenation of the segments."""

    def __init__(self, table: str, family: int = NFPROTO_IPV4) -> None:
        self.table = table
        self.family = family
        self.buf = bytearray()  # the segment being filled (the last message is always in it)
        self.segments: list[bytearray] = []  # full segments before it
        self._bases: list[int] = []  # each full segment's offset
        self._base = 0  # self.buf's offset
        self.offsets = array.array("Q")
        self.msgs = _Messages(self)
        self._nfgen = struct.pack("=BBH", family, 0, 0)
        self._set_ids = itertools.count(1)
        self.counts = {"chains": 0, "rules": 0, "elements": 0, "sets": 0}

    def __len__(self) -> int:
        return len(self.offsets)

    def _seal(self) -> bytearray:
        """Start a new segment (called before a message when the current one is full)."""
        self.segments.append(self.buf)
        self._bases.append(self._base)
        self._base += len(self.buf)
        self.buf = bytearray()
        return self.buf

    def locate(self, offset: int) -> tuple[bytearray, int]:
        """The segment holding the message at `offset`, and its offset there."""
        if offset >= self._base:
            return self.buf, offset - self._base
        i = bisect.bisect_right(self._bases, offset) - 1
        return self.segments[i], offset - self._bases[i]

    @property
    def size(self) -> int:
        return self._base + len(self.buf)

    def buffers(self) -> list[bytearray]:
        return [*self.segments, self.buf]

    def use(self, table: str) -> None:
        """Address the following messages to `table` (same family): one transaction may span tables."""
        self.table = table

    def _add(self, msg: int, flags: int, body: bytes) -> None:
        buf = self.buf if len(self.buf) < _SEGMENT else self._seal()
        self.offsets.append(self._base + len(buf))
        buf += _nlhdr(20 + len(body), (NFNL_SUBSYS_NFTABLES << 8) | msg, NLM_F_REQUEST | flags,
                      len(self.offsets), 0)
        buf += self._nfgen
        buf += body

    def add_table(self) -> None:
        self._add(NEWTABLE, NLM_F_CREATE, s(TABLE_NAME, self.table))

    def del_table(self) -> None:
        self._add(DELTABLE, 0, s(TABLE_NAME, self.table))

    def add_chain(self, name: str, hook: int | None = None, priority: int = 0, type_: str = "nat",
                  policy: int | None = ACCEPT) -> None:
        body = s(CHAIN_TABLE, self.table) + _name_attr(CHAIN_NAME, name)
        if hook is not None:
            body += nest(CHAIN_HOOK, u32(HOOK_HOOKNUM, hook), i32(HOOK_PRIORITY, priority))
            body += s(CHAIN_TYPE, type_) + (u32(CHAIN_POLICY, policy) if policy is not None else b"")
        self._add(NEWCHAIN, NLM_F_CREATE, body)
        self.counts["chains"] += 1

    def flush_chain(self, name: str) -> None:
        self._add(DELRULE, 0, s(RULE_TABLE, self.table) + s(RULE_CHAIN, name))

    def del_chain(self, name: str) -> None:
        self._add(DELCHAIN, 0, s(CHAIN_TABLE, self.table) + s(CHAIN_NAME, name))

    def add_rule(self, chain: str, exprs: bytes, compat: bytes = b"", prepend: bool = False,
                 echo: bool = False) -> int:
        """Append (or, `prepend`, insert first) a rule; `compat` is a `rule_compat` attribute for xt
        matches that need the rule's protocol. `echo`: the kernel returns the new rule (its handle)
        from `NftSocket.send`. Returns the message's index in the batch."""
        flags = _APPEND if not (prepend or echo) else \
            NLM_F_CREATE | (0 if prepend else NLM_F_APPEND) | (NLM_F_ECHO if echo else 0)
        head = _rule_head(self.table, chain)
        buf, offsets = self.buf if len(self.buf) < _SEGMENT else self._seal(), self.offsets
        offsets.append(self._base + len(buf))
        buf += _nlhdr(20 + len(head) + 4 + len(exprs) + len(compat), _NEWRULE, NLM_F_REQUEST | flags,
                      len(offsets), 0)
        buf += self._nfgen
        buf += head
        buf += _hdr(4 + len(exprs), _EXPRS_NESTED)
        buf += exprs
        buf += compat
        self.counts["rules"] += 1
        return len(offsets) - 1

    def add_rule_body(self, chain: str, body: bytes, echo: bool = False) -> int:
        """Append a rule whose payload after table and chain (expressions nest, any compat) is
        built already; `echo` as in add_rule. Returns the message's index in the batch."""
        head = _rule_head(self.table, chain)
        buf, offsets = self.buf if len(self.buf) < _SEGMENT else self._seal(), self.offsets
        offsets.append(self._base + len(buf))
        buf += _nlhdr(20 + len(head) + len(body), _NEWRULE,
                      NLM_F_REQUEST | _APPEND | (NLM_F_ECHO if echo else 0), len(offsets), 0)
        buf += self._nfgen
        buf += head
        buf += body
        self.counts["rules"] += 1
        return len(offsets) - 1

    def append_rules(self, chain: str, items: Iterable[T], body: Callable[[T], bytes]) -> None:
        """Append one rule per item, `body(item)` being its payload after table and chain (the
        expressions nest and any NFTA_RULE_COMPAT): a full load's hot loop, with the chain's
        header bytes built once."""
        prefix = self._nfgen + _rule_head(self.table, chain)
        fixed = 16 + len(prefix)
        buf, offsets, pack = self.buf, self.offsets, _nlhdr
        flags = NLM_F_REQUEST | _APPEND
        n = 0
        for item in items:
            b = body(item)
            if len(buf) >= _SEGMENT:
                buf = self._seal()
            offsets.append(self._base + len(buf))
            buf += pack(fixed + len(b), _NEWRULE, flags, len(offsets), 0)
            buf += prefix
            buf += b
            n += 1
        self.counts["rules"] += n

    def del_rule(self, chain: str, handle: int) -> None:
        self._add(DELRULE, 0, s(RULE_TABLE, self.table) + s(RULE_CHAIN, chain) + u64(RULE_HANDLE, handle))

    def add_set(self, name: str, key_len: int, key_type: int, flags: int = 0, data_verdict: bool = False,
                timeout_ms: int | None = None, concat: tuple[int, ...] = (), size: int | None = None,
                key_byteorder: int | None = None, data: tuple[int, int] | None = None,
                udata: bytes | None = None) -> int:
        set_id = next(self._set_ids)
        body = s(SET_TABLE, self.table) + s(SET_NAME, name) + u32(SET_FLAGS, flags) + \
            u32(SET_KEY_TYPE, key_type) + u32(SET_KEY_LEN, key_len)
        if data_verdict:
            body += u32(SET_DATA_TYPE, DATA_TYPE_VERDICT)
        elif data is not None:  # (nft datatype, length): a data map
            body += u32(SET_DATA_TYPE, data[0]) + u32(SET_DATA_LEN, data[1])
        desc = b""
        if size is not None:
            desc += u32(SET_DESC_SIZE, size)
        if concat:
            desc += nest(SET_DESC_CONCAT, *(nest(LIST_ELEM, u32(SET_FIELD_LEN, n)) for n in concat))
        if desc:
            body += nest(SET_DESC, desc)
        body += u32(SET_ID, set_id)
        if timeout_ms is not None:
            body += u64(SET_TIMEOUT, timeout_ms)
        if key_byteorder is not None:
            body += attr(SET_USERDATA, bytes([UDATA_SET_KEYBYTEORDER, 4]) + host_u32(key_byteorder))
        elif udata is not None:
            body += attr(SET_USERDATA, udata)
        self._add(NEWSET, NLM_F_CREATE, body)
        self.counts["sets"] += 1
        return set_id

    def del_set(self, name: str) -> None:
        self._add(DELSET, 0, s(SET_TABLE, self.table) + s(SET_NAME, name))

    def _elems(self, msg: int, set_name: str, elems: list[bytes], set_id: int | None, flags: int) -> None:
        head = s(ELEM_LIST_TABLE, self.table) + s(ELEM_LIST_SET, set_name)
        if set_id is not None:
            head += u32(ELEM_LIST_SET_ID, set_id)
        chunk: list[bytes] = []
        size = 0
        for e in elems:  # an attribute's length is 16 bits: keep each message under 64 KiB
            if size + len(e) > 60000:
                self._add(msg, flags, head + nest(ELEM_LIST_ELEMENTS, *chunk))
                chunk, size = [], 0
            chunk.append(e)
            size += len(e)
        if chunk:
            self._add(msg, flags, head + nest(ELEM_LIST_ELEMENTS, *chunk))

    def add_elements(self, set_name: str, elems: list[bytes], set_id: int | None = None) -> None:
        if elems:
            self._elems(NEWSETELEM, set_name, elems, set_id, NLM_F_CREATE)
            self.counts["elements"] += len(elems)

    def del_elements(self, set_name: str, elems: list[bytes]) -> None:
        if elems:
            self._elems(DELSETELEM, set_name, elems, None, 0)


@functools.lru_cache(maxsize=64)
def rule_compat(proto: int, inverted: bool = False) -> bytes:
    """NFTA_RULE_COMPAT: the rule's layer 4 protocol, which xt matches such as tcp/udp check against."""
    return nest(RULE_COMPAT, u32(RULE_COMPAT_PROTO, proto), u32(RULE_COMPAT_FLAGS, 1 if inverted else 0))


def element(key: bytes, verdict: tuple[int, str | None] | None = None, data: bytes | None = None) -> bytes:
    parts = value(ELEM_KEY, key)
    if verdict is not None:
        parts += verdict_data(ELEM_DATA, verdict[0], verdict[1])
    elif data is not None:
        parts += value(ELEM_DATA, data)
    return nest(LIST_ELEM, parts)


class NftSocket:
    """An NETLINK_NETFILTER socket in the calling thread's netns; sends batches, collects errors."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.bind((0, 0))
        self._seq = itertools.count(int.from_bytes(os.urandom(2), "little") << 8)
        self._bufsize = 0
        self._ensure_buf(1 << 20)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 8 << 20)

    def _ensure_buf(self, n: int) -> None:
        if n + 4096 > self._bufsize:
            self._bufsize = max(n + 65536, self._bufsize * 2)
            self.sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, self._bufsize)

    def close(self) -> None:
        self.sock.close()

    def _recv(self, n: int) -> bytes:
        """The kernel answers within the send/dump call that asked; a silence means a reply we do not
        recognise was the last one, so fail loudly instead of waiting forever."""
        if not select.select([self.sock], [], [], REPLY_TIMEOUT)[0]:
            raise NftError(errno.ETIMEDOUT,
                           f"nf_tables: no reply from the kernel within {REPLY_TIMEOUT:.0f} s")
        return self.sock.recv(n)

    def send(self, batch: Batch) -> list[tuple[int, int, dict[int, bytes]]]:
        """Commit `batch` atomically; raise NftError with the first kernel error (nothing applied then).

        Returns what the kernel echoed for messages sent with NLM_F_ECHO: (index of the message in
        the batch, message type, attributes), e.g. a new rule's NFTA_RULE_HANDLE."""
        if not batch.offsets:
            return []
        nfgen_batch = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(NFNL_SUBSYS_NFTABLES))
        count = len(batch.offsets)
        last_seq = count  # message i carries i + 1 (Batch._add); BEGIN 0, END count + 1
        begin = struct.pack("=IHHII", 20, NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, 0, 0) + nfgen_batch
        end = struct.pack("=IHHII", 20, NFNL_MSG_BATCH_END, NLM_F_REQUEST, count + 1, 0) + nfgen_batch
        last_buf, last_off = batch.locate(batch.offsets[-1])
        (flags,) = struct.unpack_from("=H", last_buf, last_off + 6)
        struct.pack_into("=H", last_buf, last_off + 6, flags | NLM_F_ACK)  # the ACK that ends our reading

        class _Seqs:  # sequence number -> message index
            @staticmethod
            def get(seq: int, default: int = -1) -> int:
                return seq - 1 if 1 <= seq <= last_seq else default

        seqs = _Seqs
        self._ensure_buf(batch.size + 40)
        buffers: list[bytes | bytearray] = [*batch.buffers()]
        if len(buffers) > 1000:  # IOV_MAX is 1024
            buffers = [b"".join(buffers)]
        self.sock.sendmsg([begin, *buffers, end])  # one skb: the kernel runs one batch per message
        errors: list[tuple[int, int]] = []
        echoed: list[tuple[int, int, dict[int, bytes]]] = []
        done = False
        while not done:
            buf = self._recv(1 << 20)
            off = 0
            while off + 16 <= len(buf):
                length, mtype, _flags, seq, _pid = struct.unpack_from("=IHHII", buf, off)
                if length < 16:
                    break
                if mtype >> 8 == NFNL_SUBSYS_NFTABLES:
                    echoed.append((seqs.get(seq, -1), mtype & 0xFF, parse_attrs(buf[off + 20:off + length])))
                elif mtype == NLMSG_ERROR:
                    (code,) = struct.unpack_from("=i", buf, off + 16)
                    if code:
                        errors.append((seqs.get(seq, -1), -code))
                    if seq == last_seq or (seq == 0 and code):  # an error on BATCH_BEGIN ends it too
                        done = True
                elif mtype == NLMSG_DONE:
                    done = True
                off += (length + 3) & ~3
        if errors:
            idx, err = errors[0]
            what = _describe(batch.msgs[idx]) if idx >= 0 else "batch"
            raise NftError(err, f"nf_tables batch failed at message {idx} ({what}): "
                                f"{errno.errorcode.get(err, err)} ({os.strerror(err)}); "
                                f"{len(errors)} error(s)")
        return echoed

    def get_chain(self, table: str, chain: str, family: int = NFPROTO_IPV4) -> dict[int, bytes] | None:
        """One chain's attributes, or None if it (or its table) does not exist."""
        got = self.dump(GETCHAIN, family, table, chain, CHAIN_NAME, single=True)
        return got[0] if got else None

    def rule_handles(self, table: str, chain: str, family: int = NFPROTO_IPV4) -> list[int]:
        """The handles of `chain`'s rules in order: a rule dump reading only NFTA_RULE_HANDLE."""
        body = s(RULE_TABLE, table) + s(RULE_CHAIN, chain)
        seq = next(self._seq)
        hdr = struct.pack("=IHHII", 20 + len(body), (NFNL_SUBSYS_NFTABLES << 8) | GETRULE,
                          NLM_F_REQUEST | NLM_F_DUMP, seq, 0)
        self.sock.sendall(hdr + struct.pack("=BBH", family, 0, 0) + body)
        out: list[int] = []
        unpack_hdr, unpack_attr = struct.Struct("=IHHII").unpack_from, struct.Struct("=HH").unpack_from
        be64 = struct.Struct(">Q").unpack_from
        while True:
            buf = self._recv(1 << 16)
            off = 0
            while off + 16 <= len(buf):
                length, mtype, _flags, rseq, _pid = unpack_hdr(buf, off)
                if length < 16:
                    break
                if rseq == seq:
                    if mtype == NLMSG_DONE:
                        return out
                    if mtype == NLMSG_ERROR:
                        (code,) = struct.unpack_from("=i", buf, off + 16)
                        if code:
                            raise NftError(-code, f"nf_tables rule dump failed: {os.strerror(-code)}")
                    else:  # attributes come table, chain, handle, ...: walk until the handle
                        a, end = off + 20, off + length
                        while a + 4 <= end:
                            n, t = unpack_attr(buf, a)
                            if t & 0x3FFF == RULE_HANDLE:
                                out.append(be64(buf, a + 4)[0])
                                break
                            a += (n + 3) & ~3
                off += (length + 3) & ~3

    def dump(self, msg: int, family: int = NFPROTO_IPV4, table: str | None = None,
             chain: str | None = None, chain_attr: int = RULE_CHAIN,
             single: bool = False) -> list[dict[int, bytes]] | None:
        """A GET* dump (GETCHAIN, GETRULE, ...), optionally of one table (and, for rules, one chain):
        each object's top-level attributes; None when the kernel says that table or chain does not
        exist (a rule dump of a missing chain may also just be empty). `single`: a plain GET."""
        body = (s(RULE_TABLE, table) if table else b"") + (s(chain_attr, chain) if chain else b"")
        seq = next(self._seq)
        hdr = struct.pack("=IHHII", 20 + len(body), (NFNL_SUBSYS_NFTABLES << 8) | msg,
                          NLM_F_REQUEST | (NLM_F_ACK if single else NLM_F_DUMP), seq, 0)
        self.sock.sendall(hdr + struct.pack("=BBH", family, 0, 0) + body)
        out: list[dict[int, bytes]] = []
        while True:
            buf = self._recv(1 << 16)  # dump skbs are at most 32 KiB
            off = 0
            while off + 16 <= len(buf):
                length, mtype, _flags, rseq, _pid = struct.unpack_from("=IHHII", buf, off)
                if length < 16:
                    break
                if rseq == seq:
                    if mtype == NLMSG_DONE:  # chain dumps ignore the table filter on some kernels
                        return [o for o in out if not table or o.get(1) == table.encode() + b"\0"]
                    if mtype == NLMSG_ERROR:
                        (code,) = struct.unpack_from("=i", buf, off + 16)
                        if -code == errno.ENOENT:
                            return None
                        if code:
                            raise NftError(-code, f"nf_tables dump failed: {os.strerror(-code)}")
                        if single:
                            return out
                        continue
                    out.append(parse_attrs(buf[off + 20:off + length]))
                off += (length + 3) & ~3


def parse_attrs(data: bytes) -> dict[int, bytes]:
    """Top-level netlink attributes by type (flags masked off); nested ones stay raw bytes."""
    out: dict[int, bytes] = {}
    off = 0
    while off + 4 <= len(data):
        n, t = struct.unpack_from("=HH", data, off)
        if n < 4:
            break
        out[t & 0x3FFF] = data[off + 4:off + n]
        off += (n + 3) & ~3
    return out


def parse_list(data: bytes) -> list[tuple[int, bytes]]:
    """Attributes in order, repeats kept (an expression list, a nest's members)."""
    out: list[tuple[int, bytes]] = []
    off = 0
    while off + 4 <= len(data):
        n, t = struct.unpack_from("=HH", data, off)
        if n < 4:
            break
        out.append((t & 0x3FFF, data[off + 4:off + n]))
        off += (n + 3) & ~3
    return out


def attr_str(data: bytes) -> str:
    return data.rstrip(b"\0").decode()


_NAMES = {NEWTABLE: "newtable", DELTABLE: "deltable", NEWCHAIN: "newchain", DELCHAIN: "delchain",
          NEWRULE: "newrule", DELRULE: "delrule", NEWSET: "newset", DELSET: "delset",
          NEWSETELEM: "newsetelem", DELSETELEM: "delsetelem"}


def _describe(msg: tuple[int, int, bytes]) -> str:
    mtype, _, body = msg
    strings: list[str] = []
    off = 0
    while off + 4 <= len(body) and len(strings) < 2:
        n, t = struct.unpack_from("=HH", body, off)
        if n < 4:
            break
        if not t & NLA_F_NESTED and body[off + n - 1:off + n] == b"\0" and n > 5:
            text = body[off + 4:off + n - 1].decode("latin-1")
            if text.isprintable():
                strings.append(text)
        off += (n + 3) & ~3
    return f"{_NAMES.get(mtype & 0xFF, mtype)} {' '.join(strings)}"
