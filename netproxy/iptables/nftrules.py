"""iptables rule specs → the nf_tables expressions iptables-nft (1.8.x) itself would write.

The iptables-nft layout, learned from `nft --debug=netlink` and raw rule dumps of
tables written by iptables-nft-restore (tests/integration/netproxy/test_iptnft.py
keeps it honest): the ip header fields first (`meta l4proto`, then saddr, then
daddr, a prefix loaded as its whole bytes only or masked with `bitwise` when it
does not end on a byte), then the matches in command-line order: `tcp`/`udp`
with a --dport become a native transport payload compare, `mark` becomes
`meta mark` & mask, everything else (comment, statistic, recent, addrtype,
conntrack, sctp) is an xt compat `match` carrying the kernel's xt_* struct (one
exception: a bare `-m tcp`/`-m udp` is written as native `th dport 0-65535`, which
iptables-nft parses back to the same match and the kernel validates for free, see
_l4_bare); then a `counter` (unless off: use_counters); then the verdict (`immediate` jump/goto/accept/
drop/return) or an xt compat `target` (DNAT rev 2, MASQUERADE, MARK rev 2,
REJECT). The rule also carries NFTA_RULE_COMPAT (its -p protocol), which xt
matches such as tcp check.

Only the vocabulary netproxy's plans use is understood (an unknown option raises).
`body` is the full loads' entry: the shapes that make up a large cluster's ruleset
(KUBE-SEP masquerade and DNAT, KUBE-SVC statistic jumps, plain jumps, the ClusterIP
dispatch rule) are spliced from byte templates built once per shape (and per verdict
chain name length), ~1.5-3 us a rule here against 5-15 us through the parser; any other
spec goes through the general encoder. Only small repeated pieces are cached.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import struct

from kernel import nftables as nl

PROTOS = {"tcp": 6, "udp": 17, "sctp": 132}
VERDICTS = {"ACCEPT": nl.ACCEPT, "DROP": nl.DROP, "RETURN": nl.RETURN}
# xt_conntrack state bits: INVALID 1, then 1 << (ctinfo + 1) for ESTABLISHED(0), RELATED(1), NEW(2)
CT_STATES = {"INVALID": 1, "ESTABLISHED": 2, "RELATED": 4, "NEW": 8, "UNTRACKED": 64}
ADDRTYPES = {"UNSPEC": 1, "UNICAST": 2, "LOCAL": 4, "BROADCAST": 8, "ANYCAST": 16, "MULTICAST": 32,
             "BLACKHOLE": 64, "UNREACHABLE": 128, "PROHIBIT": 256}
REJECT_WITH = {"icmp-net-unreachable": 0, "icmp-host-unreachable": 1, "icmp-proto-unreachable": 2,
               "icmp-port-unreachable": 3}

_META_L4 = nl.meta_load(nl.REG_1, nl.META_L4PROTO)
_COUNTER = b""  # each rule's `counter` expression, or nothing: see use_counters
_SADDR_OFF, _DADDR_OFF = 12, 16


class UnsupportedRule(ValueError):
    pass


def use_counters(on: bool) -> None:
    """Whether rules carry iptables-nft's per-rule `counter` (process-wide: the templates are shared).

    Off by default: `iptables-save` prints the same rules, `iptables -L -v`/`iptables-save -c` show
    0 packets for them, `iptables -C/-D` still find them. Why: a counter is a percpu allocation per
    rule in the kernel's load (full sync at 10k Services: kernel CPU 1.9 -> 1.4-1.6 s) and an
    expression more per rule in the commit's validation walk (a one-rule nat commit at 10k: -4 to
    -7 ms CPU, load 7-8). `counters=true` (backend option) writes them as iptables-nft does."""
    global _COUNTER
    c = nl.COUNTER if on else b""
    if c != _COUNTER:
        _COUNTER = c
        _jump_split.cache_clear()
        _dnat_pre.cache_clear()
        _SRC_JUMP.clear()


# -- xt struct blobs (x86_64 / any LP64 little-endian host; sizes XT_ALIGNed to 8) ----------------------
def _comment(text: str) -> bytes:
    raw = text.encode()[:255]
    return _COMMENT_HEAD + raw + bytes(256 - len(raw))


@functools.lru_cache(maxsize=4096)
def _statistic(probability: float) -> bytes:
    # xt_statistic_info: mode, flags, u.random.probability (= u.nth.every), nth.packet, nth.count, master
    p = int(0x80000000 * probability + 0.5)  # libxt_statistic: lround()
    return nl.xt_match("statistic", 0, struct.pack("=HHIII", 0, 0, p, 0, p) + b"\0" * 8)


def _recent(name: str, seconds: int, flags: int, side: int, mask: str) -> bytes:
    # xt_recent_mtinfo_v1: seconds, hit_count, check_set, invert, name[200], side, pad, mask (16), pad to 232
    info = struct.pack("=IIBB200sBx16s", seconds, 0, flags, 0, name.encode(), side,
                       socket.inet_aton(mask) + b"\0" * 12)
    return nl.xt_match("recent", 1, info + b"\0" * (232 - len(info)))


def _addrtype(src: int, dst: int) -> bytes:
    return nl.xt_match("addrtype", 1, struct.pack("=HHI", src, dst, 0))  # xt_addrtype_info_v1


def _conntrack(states: int) -> bytes:
    # xt_conntrack_mtinfo3: 8 addresses (128), expires min/max, l4proto, 4 ports, match_flags,
    # invert_flags, state_mask, status_mask, 4 high ports; XT_CONNTRACK_STATE = 1
    info = b"\0" * 136 + struct.pack("=H4HHHHH4H", 0, 0, 0, 0, 0, 1, 0, states, 0, 0, 0, 0, 0)
    return nl.xt_match("conntrack", 3, info + b"\0" * (168 - len(info)))


# chunkmap[64] and chunk_match_type zero, flag_info[4] as libxt_sctp leaves them ({0xff, 0, 0}), flag_count 0
_SCTP_MID = bytes(256) + bytes(4) + b"\xff\0\0" * 4 + bytes(4)


def _sctp(dport: int | None) -> bytes:
    # xt_sctp_info: dpts[2], spts[2], chunkmap[64], chunk_match_type, flag_info[4], flag_count, flags,
    # invflags
    head = struct.pack("=HHHH", dport or 0, dport or 0, 0, 0)
    return nl.xt_match("sctp", 0, head + _SCTP_MID + struct.pack("=II", 2 if dport else 0, 0) + bytes(4))


@functools.lru_cache(maxsize=8)
def _l4_bare(proto: str) -> bytes:
    """`-m tcp`/`-m udp` with no option (every KUBE-SEP DNAT rule): native `th dport 0-65535`.

    iptables-nft itself writes the xt compat match here, but it parses this native pair back to the
    same `-m tcp` (`iptables-save` prints the rule identically; `iptables -C/-D` with the spec find it;
    tests/integration/netproxy/test_iptnft.py checks both), and the compat match is the costly kind
    in the commit's validation walk: each reachable one runs nft_compat's hook check once per base
    hook that reaches it (~0.2 us), 30k of them per walk at 10k Services x 3 endpoints; this pair has
    no validate op. Measured at 10k (load 7-8): a one-rule nat commit 85-88 -> 74-76 ms CPU.
    Same verdict on every packet the DNAT rules see (a TCP/UDP header is there, conntrack has
    reassembled fragments); only a truncated header differs (xt drops it, this does not match)."""
    if proto == "sctp":
        return _sctp(None)
    return _DPORT + _ANY_PORT


def _dnat(ip: str, port: int | None) -> bytes:
    # nf_nat_range2: flags (MAP_IPS 1 | PROTO_SPECIFIED 2), min/max addr (16 each), min/max/base proto
    addr = socket.inet_aton(ip) + bytes(12)
    flags = 1 | (2 if port else 0)
    pp = struct.pack(">H", port or 0)
    return _DNAT_HEAD + struct.pack("=I", flags) + addr + addr + pp + pp + bytes(8)


def _masquerade(random_fully: bool) -> bytes:
    # nf_nat_ipv4_multi_range_compat: rangesize 1, range {flags, min_ip, max_ip, min, max}
    flags = 16 if random_fully else 0  # NF_NAT_RANGE_PROTO_RANDOM_FULLY
    return nl.xt_target("MASQUERADE", 0, struct.pack("=II", 1, flags) + bytes(16))


def _mark_target(mark: int, mask: int) -> bytes:
    return nl.xt_target("MARK", 2, struct.pack("=II", mark, mask))


def _reject(with_: str) -> bytes:
    return nl.xt_target("REJECT", 0, struct.pack("=I", REJECT_WITH[with_]) + bytes(4))


# -- fast builders: fixed-size expressions as a precomputed head + their variable bytes --------------------
def _head(whole: bytes, tail_len: int) -> bytes:
    return whole[:len(whole) - tail_len]


_CMP_HEAD = {(op, n): _head(nl.cmp(nl.REG_1, op, bytes(n)), n + (-n & 3))
             for op in (nl.CMP_EQ, nl.CMP_NEQ) for n in (1, 2, 3, 4)}
_PAD = (b"", b"\0\0\0", b"\0\0", b"\0")


def _cmp(op: int, data: bytes) -> bytes:
    n = len(data)
    return _CMP_HEAD[(op, n)] + data + _PAD[n & 3]


_COMMENT_HEAD = _head(nl.xt_match("comment", 0, bytes(256)), 256)
_DNAT_HEAD = _head(nl.xt_target("DNAT", 2, bytes(48)), 48)
_SADDR4 = nl.payload(nl.REG_1, nl.PAYLOAD_NETWORK, _SADDR_OFF, 4)
_DADDR4 = nl.payload(nl.REG_1, nl.PAYLOAD_NETWORK, _DADDR_OFF, 4)
_DPORT = nl.payload(nl.REG_1, nl.PAYLOAD_TRANSPORT, 2, 2)
_ANY_PORT = nl.expr("range", nl.u32(1, nl.REG_1), nl.u32(2, nl.CMP_EQ), nl.value(3, b"\0\0"),
                    nl.value(4, b"\xff\xff"))  # range eq reg 1 0x0000 0xffff
_be16 = struct.Struct(">H").pack
_hdr = struct.Struct("=HH").pack
_imm_head = nl.u32(1, nl.REG_VERDICT)
_IMM_NAME = nl.s(nl.EXPR_NAME, "immediate")


@functools.lru_cache(maxsize=1024)
def _jump(chain: str, code: int = nl.JUMP) -> bytes:
    """immediate reg 0 jump/goto <chain>; a small LRU keeps the repeated ones (KUBE-MARK-MASQ)."""
    name = chain.encode() + b"\0"
    n = 4 + len(name)
    chain_attr = _hdr(n, nl.VERDICT_CHAIN) + name + _PAD[n & 3]
    inner = nl.i32(nl.VERDICT_CODE, code) + chain_attr
    verdict = (_hdr(8 + len(inner), 2 | nl.NLA_F_NESTED)
               + _hdr(4 + len(inner), nl.DATA_VERDICT | nl.NLA_F_NESTED) + inner)
    data = _imm_head + verdict
    body = _IMM_NAME + _hdr(4 + len(data), nl.EXPR_DATA | nl.NLA_F_NESTED) + data
    return _hdr(4 + len(body), nl.LIST_ELEM | nl.NLA_F_NESTED) + body


# -- native expressions ----------------------------------------------------------------------------------
def _addr(offset: int, cidr: str, negate: bool) -> bytes:
    """iptables-nft's add_addr: whole mask bytes load only those bytes; a partial byte adds a bitwise."""
    if cidr.endswith("/32"):
        return (_SADDR4 if offset == _SADDR_OFF else _DADDR4) + \
            _cmp(nl.CMP_NEQ if negate else nl.CMP_EQ, socket.inet_aton(cidr[:-3]))
    return _addr_prefix(offset, cidr, negate)


@functools.lru_cache(maxsize=1024)
def _addr_prefix(offset: int, cidr: str, negate: bool) -> bytes:
    net = ipaddress.IPv4Network(cidr, strict=False)
    mask = net.netmask.packed
    op = nl.CMP_NEQ if negate else nl.CMP_EQ
    plen = net.prefixlen
    if plen % 8 == 0:
        n = plen // 8
        return nl.payload(nl.REG_1, nl.PAYLOAD_NETWORK, offset, n) + \
            nl.cmp(nl.REG_1, op, net.network_address.packed[:n])
    return nl.payload(nl.REG_1, nl.PAYLOAD_NETWORK, offset, 4) + \
        nl.bitwise(nl.REG_1, nl.REG_1, mask, bytes(4)) + nl.cmp(nl.REG_1, op, net.network_address.packed)


def _dport(port: int) -> bytes:
    return _DPORT + _cmp(nl.CMP_EQ, _be16(port))


def _mark_match(mark: int, mask: int, negate: bool) -> bytes:
    return (nl.meta_load(nl.REG_1, nl.META_MARK)
            + nl.bitwise(nl.REG_1, nl.REG_1, struct.pack("=I", mask), bytes(4))
            + nl.cmp(nl.REG_1, nl.CMP_NEQ if negate else nl.CMP_EQ, struct.pack("=I", mark)))


def _cidr(text: str) -> str:
    return text if "/" in text else text + "/32"


def _split(spec: str) -> list[str]:
    """Tokens of a rule spec; a double-quoted comment is one token (plans never nest quotes)."""
    if '"' not in spec:
        return spec.split()
    out: list[str] = []
    for i, part in enumerate(spec.split('"')):
        if i % 2:
            out.append(part)
        else:
            out.extend(part.split())
    return out


def encode(spec: str) -> tuple[bytes, bytes]:
    """One rule spec (the text after `-A CHAIN`) → (expressions, NFTA_RULE_COMPAT attribute).

    Not memoized: a cache of every rule's bytes would cost ~60 MB of RSS at 10k Services to save
    a resync ~1-2 s of CPU (measured); only the small repeated pieces (jumps, blobs) are cached."""
    return _encode(spec)


_NO_COMPAT = b""


def _fast(t: list[str]) -> tuple[bytes, bytes] | None:
    """The comment-less shapes that make up a large cluster's chains (kube-proxy's large-cluster mode
    drops per-endpoint comments), without the general parser: ~5x faster per rule."""
    n = len(t)
    if n == 2 and t[0] == "-j" and _is_chain(t[1]):
        return _COUNTER + _jump(t[1]), _NO_COMPAT
    if n == 4 and t[0] == "-s" and t[2] == "-j" and t[1].endswith("/32") and _is_chain(t[3]):
        return _SADDR4 + _cmp(nl.CMP_EQ, socket.inet_aton(t[1][:-3])) + _COUNTER + _jump(t[3]), _NO_COMPAT
    if n == 8 and t[0] == "-m" and t[2] == "-p" and t[4] == "-j" and t[5] == "DNAT" and t[1] == t[3] \
            and t[6] == "--to-destination" and t[1] in PROTOS:
        ip, _, port = t[7].partition(":")
        proto = PROTOS[t[1]]
        return (_META_L4 + _cmp(nl.CMP_EQ, bytes((proto,))) + _l4_bare(t[1]) + _COUNTER +
                _dnat(ip, int(port) if port else None)), nl.rule_compat(proto)
    if n == 8 and t[1] == "statistic" and t[0] == "-m" and t[2] == "--mode" and t[3] == "random" \
            and t[4] == "--probability" and t[6] == "-j" and _is_chain(t[7]):
        return _statistic(float(t[5])) + _COUNTER + _jump(t[7]), _NO_COMPAT
    return None


def _is_chain(name: str) -> bool:
    """netproxy's chains all carry a `PREFIX-` (KUBE-SVC-…); targets (DNAT, MASQUERADE, …) have no dash."""
    return "-" in name


def _fast_dispatch(t: list[str]) -> tuple[bytes, bytes] | None:
    """`-m comment --comment C -m P -p P -d IP/32 --dport N [! -s CIDR] -j CHAIN`: one per Service
    port in KUBE-SERVICES and at the head of its KUBE-SVC chain."""
    n = len(t)
    if not (n in (14, 17) and t[0] == "-m" and t[1] == "comment" and t[2] == "--comment" and t[4] == "-m"
            and t[6] == "-p" and t[5] == t[7] and t[8] == "-d" and t[10] == "--dport" and t[n - 2] == "-j"
            and t[9].endswith("/32") and t[5] in PROTOS and t[5] != "sctp" and _is_chain(t[n - 1])):
        return None
    proto = PROTOS[t[5]]
    out = _META_L4 + _cmp(nl.CMP_EQ, bytes((proto,)))
    if n == 17:
        if t[12] != "!" or t[13] != "-s":
            return None
        out += _addr(_SADDR_OFF, _cidr(t[14]), True)
    out += _DADDR4 + _cmp(nl.CMP_EQ, socket.inet_aton(t[9][:-3])) + _comment(t[3]) + _dport(int(t[11]))
    return out + _COUNTER + _jump(t[n - 1]), nl.rule_compat(proto)


_DNAT_PREFIXES = {f"-m {p} -p {p} -j DNAT --to-destination ": p for p in ("tcp", "udp")}
_STAT_PREFIX = "-m statistic --mode random --probability "


def _prefixed(spec: str) -> tuple[bytes, bytes] | None:
    """The four large-cluster shapes recognised by prefix and one partition, before any split."""
    head = spec[:3]
    if head == "-j ":
        target = spec[3:]
        if " " not in target and _is_chain(target):
            return _COUNTER + _jump(target), _NO_COMPAT
    elif head == "-s ":
        src, _, rest = spec[3:].partition(" -j ")
        if src.endswith("/32") and " " not in src and " " not in rest and _is_chain(rest):
            return _SADDR4 + _cmp(nl.CMP_EQ, socket.inet_aton(src[:-3])) + _COUNTER + _jump(rest), _NO_COMPAT
    elif head == "-m ":
        if spec.startswith(_STAT_PREFIX):
            prob, _, target = spec[len(_STAT_PREFIX):].partition(" -j ")
            if " " not in prob and " " not in target and _is_chain(target):
                return _statistic(float(prob)) + _COUNTER + _jump(target), _NO_COMPAT
        else:
            for prefix, proto_name in _DNAT_PREFIXES.items():
                if spec.startswith(prefix):
                    dest = spec[len(prefix):]
                    if " " in dest:
                        return None
                    ip, _, port = dest.partition(":")
                    proto = PROTOS[proto_name]
                    return (_META_L4 + _cmp(nl.CMP_EQ, bytes((proto,))) + _l4_bare(proto_name) + _COUNTER +
                            _dnat(ip, int(port) if port else None)), nl.rule_compat(proto)
    return None


# -- rule bodies: the NFTA_RULE_EXPRESSIONS nest and NFTA_RULE_COMPAT, as one bytes ----------------------
# The large-cluster shapes (most of a big ruleset) are spliced from templates: the fixed bytes of each
# shape are built once (per verdict chain name length), so a rule costs a few slices and one join.
_EXPRS_NESTED = nl.RULE_EXPRESSIONS | nl.NLA_F_NESTED
_CMP4 = _CMP_HEAD[(nl.CMP_EQ, 4)]
_DPORT_PRE = _DPORT + _CMP_HEAD[(nl.CMP_EQ, 2)]
_SADDR_PRE = _SADDR4 + _CMP4
_DADDR_PRE = _DADDR4 + _CMP4
_L4 = {name: _META_L4 + _cmp(nl.CMP_EQ, bytes((num,))) for name, num in PROTOS.items()}
_COMPAT = {name: nl.rule_compat(num) for name, num in PROTOS.items()}
_aton = socket.inet_aton


@functools.lru_cache(maxsize=256)
def _jump_split(n: int, code: int = nl.JUMP) -> tuple[bytes, bytes]:
    """counter + immediate jump to a chain whose name has `n` (ASCII) characters: the bytes before
    the name and after it (the name is the last attribute, so it splits in two)."""
    whole = _COUNTER + _jump("x" * n, code)
    tail = 1 + _PAD[(5 + n) & 3].__len__()  # the NUL and the padding of the n + 1 byte name
    return whole[:len(whole) - n - tail], whole[len(whole) - tail:]


def _counter_jump(chain: str) -> bytes:
    head, tail = _jump_split(len(chain))
    return head + chain.encode() + tail


@functools.lru_cache(maxsize=64)
def _dnat_pre(proto: str, with_port: bool) -> bytes:
    """Everything of `-m P -p P -j DNAT --to-destination IP[:PORT]` before the nf_nat_range2 fields."""
    exprs = _L4[proto] + _l4_bare(proto) + _COUNTER + _DNAT_HEAD
    return _hdr(4 + len(exprs) + 48, _EXPRS_NESTED) + exprs + struct.pack("=I", 3 if with_port else 1)


_DNAT_VAR = struct.Struct("=4s12x4s12x2s2s8x")


def _body_fast(spec: str) -> bytes | None:
    """The large-cluster shapes and the ClusterIP dispatch rule, without the general parser."""
    head = spec[:3]
    if head == "-j ":
        target = spec[3:]
        if " " in target or not _is_chain(target) or not target.isascii():
            return None
        cj = _counter_jump(target)
        return _hdr(4 + len(cj), _EXPRS_NESTED) + cj
    if head == "-s ":
        src, _, target = spec[3:].partition(" -j ")
        parts = _SRC_JUMP.get(target)
        if parts is None:
            if " " in target or not _is_chain(target) or not target.isascii():
                return None
            cj = _counter_jump(target)
            parts = (_hdr(8 + len(_SADDR_PRE) + len(cj), _EXPRS_NESTED) + _SADDR_PRE, cj)
            if len(_SRC_JUMP) < 256:  # the few masquerade/Local targets: KUBE-MARK-MASQ, mostly
                _SRC_JUMP[target] = parts
        if not src.endswith("/32") or " " in src:
            return None
        return parts[0] + _aton(src[:-3]) + parts[1]
    if head != "-m ":
        return None
    kind = spec[3:5]
    if kind == "st":
        if not spec.startswith(_STAT_PREFIX):
            return None
        prob, sep, target = spec[len(_STAT_PREFIX):].partition(" -j ")
        if not sep or " " in prob or " " in target or not _is_chain(target) or not target.isascii():
            return None
        x = _statistic_s(prob) + _counter_jump(target)
        return _hdr(4 + len(x), _EXPRS_NESTED) + x
    if kind == "co":
        return _dispatch_body(spec) if spec.startswith("-m comment --comment \"") else None
    for prefix, proto in _DNAT_PREFIXES.items():
        if spec.startswith(prefix):
            ip, _, port = spec[len(prefix):].partition(":")
            if " " in port or " " in ip:
                return None
            pp = _be16(int(port)) if port else b"\0\0"
            a = _aton(ip)
            return _dnat_pre(proto, bool(port)) + _DNAT_VAR.pack(a, a, pp, pp) + _COMPAT[proto]
    return None


_SRC_JUMP: dict[str, tuple[bytes, bytes]] = {}  # `-s IP/32 -j T`: T -> the bytes before and after IP


@functools.lru_cache(maxsize=4096)
def _statistic_s(prob: str) -> bytes:
    return _statistic(float(prob))


def _dispatch_body(spec: str) -> bytes | None:
    """`-m comment --comment "C" -m P -p P -d IP/32 --dport N [! -s CIDR] -j CHAIN` (tcp/udp)."""
    end = spec.find('"', 22)
    if end < 0:
        return None
    t = spec[end + 2:].split()
    n = len(t)
    if not (n in (10, 13) and t[0] == "-m" and t[2] == "-p" and t[1] == t[3] and t[4] == "-d"
            and t[6] == "--dport" and t[n - 2] == "-j" and t[5].endswith("/32") and t[1] in _DNAT_PROTOS):
        return None
    target = t[n - 1]
    if not _is_chain(target) or not target.isascii():
        return None
    neg = b""
    if n == 13:
        if t[8] != "!" or t[9] != "-s":
            return None
        neg = _addr(_SADDR_OFF, _cidr(t[10]), True)
    raw = spec[22:end].encode()[:255]
    proto = t[1]
    x = b"".join((_L4[proto], neg, _DADDR_PRE, _aton(t[5][:-3]), _COMMENT_HEAD, raw, bytes(256 - len(raw)),
                  _DPORT_PRE, _be16(int(t[7])), b"\0\0", _counter_jump(target)))
    return _hdr(4 + len(x), _EXPRS_NESTED) + x + _COMPAT[proto]


_DNAT_PROTOS = ("tcp", "udp")


def body(spec: str) -> bytes:
    """One rule spec → its rule message payload after table and chain: the expressions nest, then
    NFTA_RULE_COMPAT if any (what `encode` returns, as one bytes)."""
    hit = _body_fast(spec)
    if hit is not None:
        return hit
    exprs, compat = _encode(spec)
    return _hdr(4 + len(exprs), _EXPRS_NESTED) + exprs + compat


def _encode(spec: str) -> tuple[bytes, bytes]:
    if '"' not in spec:
        hit = _prefixed(spec)
        if hit is not None:
            return hit
    t = _split(spec)
    hit = _fast_dispatch(t) if '"' in spec else _fast(t)
    if hit is not None:
        return hit
    return _general(t, spec)


def _general(t: list[str], spec: str) -> tuple[bytes, bytes]:
    """Any spec in the vocabulary: ip header options, then matches in order, counter, target."""
    n = len(t)
    i = 0
    proto = ""
    saddr: tuple[str, bool] | None = None
    daddr: tuple[str, bool] | None = None
    matches: list[list] = []  # [kind, options...] in command-line order
    cur: list | None = None
    target = b""
    negate = False
    while i < n:
        tok = t[i]
        if tok == "!":
            negate = True
            i += 1
            continue
        if tok == "-m":
            cur = [t[i + 1], {}]
            matches.append(cur)
            i += 2
        elif tok == "-p":
            proto = t[i + 1]
            i += 2
        elif tok in ("-s", "-d"):
            v = (_cidr(t[i + 1]), negate)
            if tok == "-s":
                saddr = v
            else:
                daddr = v
            i += 2
        elif tok in ("-j", "-g"):
            target = _target(tok, t[i + 1:])
            break
        elif tok.startswith("--") and cur is not None:
            opt = tok[2:]
            vals: list[str] = []
            i += 1
            while i < n and not t[i].startswith("-") and t[i] != "!":
                vals.append(t[i])
                i += 1
            cur[1][opt] = (vals, negate)
        else:
            raise UnsupportedRule(f"unsupported token {tok!r} in {spec!r}")
        negate = False
    out = b""
    if proto:
        out += _META_L4 + nl.cmp(nl.REG_1, nl.CMP_EQ, bytes([PROTOS[proto]]))
    if saddr:
        out += _addr(_SADDR_OFF, *saddr)
    if daddr:
        out += _addr(_DADDR_OFF, *daddr)
    for kind, opts in matches:
        out += _match(kind, opts, proto, spec)
    compat = nl.rule_compat(PROTOS.get(proto, 0)) if proto else b""
    return out + _COUNTER + target, compat


def _match(kind: str, opts: dict, proto: str, spec: str) -> bytes:
    def one(name: str) -> str:
        return opts[name][0][0]

    if kind == "comment":
        return _comment(one("comment"))
    if kind in ("tcp", "udp", "sctp"):
        if "dport" in opts and kind != "sctp":
            return _dport(int(one("dport")))
        if kind == "sctp":
            return _sctp(int(one("dport")) if "dport" in opts else None)
        if opts:
            raise UnsupportedRule(f"unsupported {kind} options in {spec!r}")
        return _l4_bare(kind)
    if kind == "statistic":
        if one("mode") != "random":
            raise UnsupportedRule(spec)
        return _statistic(float(one("probability")))
    if kind == "recent":
        flags = 0
        for name, bit in (("rcheck", 1), ("set", 2), ("update", 4), ("remove", 8), ("rttl", 16),
                          ("reap", 32)):
            if name in opts:
                flags |= bit
        seconds = int(one("seconds")) if "seconds" in opts else 0
        side = 1 if "rdest" in opts else 0
        mask = one("mask") if "mask" in opts else "255.255.255.255"
        return _recent(one("name") if "name" in opts else "DEFAULT", seconds, flags, side, mask)
    if kind == "addrtype":
        src = ADDRTYPES[one("src-type")] if "src-type" in opts else 0
        dst = ADDRTYPES[one("dst-type")] if "dst-type" in opts else 0
        return _addrtype(src, dst)
    if kind == "mark":
        vals, neg = opts["mark"]
        mark, _, mask = vals[0].partition("/")
        return _mark_match(int(mark, 0), int(mask, 0) if mask else 0xFFFFFFFF, neg)
    if kind == "conntrack":
        bits = 0
        for st in one("ctstate").split(","):
            bits |= CT_STATES[st]
        return _conntrack(bits)
    raise UnsupportedRule(f"unsupported match {kind!r} in {spec!r}")


def _target(flag: str, rest: list[str]) -> bytes:
    name = rest[0]
    opts = rest[1:]
    if name in VERDICTS:
        return nl.immediate_verdict(VERDICTS[name])
    if name == "DNAT":
        ip, _, port = opts[opts.index("--to-destination") + 1].partition(":")
        return _dnat(ip, int(port) if port else None)
    if name == "MASQUERADE":
        return _masquerade("--random-fully" in opts)
    if name == "MARK":
        op, val = opts[0], int(opts[1].split("/")[0], 0)
        if op == "--xor-mark":
            return _mark_target(val, 0)
        if op == "--or-mark":
            return _mark_target(val, val)
        if op == "--set-xmark":
            v, _, m = opts[1].partition("/")
            return _mark_target(int(v, 0), int(m, 0) if m else 0xFFFFFFFF)
        raise UnsupportedRule(f"MARK {op}")
    if name == "REJECT":
        with_opt = opts.index("--reject-with") + 1 if "--reject-with" in opts else None
        return _reject(opts[with_opt] if with_opt is not None else "icmp-port-unreachable")
    if not _is_chain(name):
        raise UnsupportedRule(f"unsupported target {name!r}")
    return _jump(name, nl.GOTO if flag == "-g" else nl.JUMP)
