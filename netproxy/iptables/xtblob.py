"""Small legacy iptables changes as one edit of the kernel's table blob (x_tables), no libiptc.

Every legacy writer replaces a whole table per commit; iptables-legacy-restore and
libiptc also parse the whole table into their own structures and re-encode all of it
(at 10k Services: ~190k entries, 40 MB). Here the table stays raw bytes between syncs: a
change fetches the blob (GET_ENTRIES), and
if it is what we last wrote (counters aside) reuses our index of it (entry offsets,
chain heads, jump-verdict positions), splices in the changed chains and rules,
re-links every jump offset with numpy, and issues one SET_REPLACE plus ADD_COUNTERS
so every untouched rule — ours or other software's — keeps its bytes and counters.
If the blob changed under us, the index is rebuilt from it first (a walk of every
entry: ~1 s at 10k Services, paid by the first change after a start or a drift).
The read is never skipped: another program's same-size edit (Docker deleting and
re-adding a same-shaped rule) leaves GET_INFO's count and size unchanged, and
replacing from a stale copy would undo it.

Measured (bench/netproxy_sync.py, and interleaved A/B runs on one machine): this is
no faster than python-iptables/libiptc (10k Services: ~460 vs ~480 ms; 5k: ~240 vs
~230 ms), because both are dominated by the kernel's GET_ENTRIES + SET_REPLACE of the
whole table (~310 ms of it at 10k) and libiptc's own parse/compile is C and cheap.
So the proxier keeps libiptc by default; this path is `incremental="xtblob"`.

Rules are encoded by python-iptables (the same libxtables parsers iptables uses:
byte-identical, tested against iptables-legacy's own entries) except standard
targets (jumps, RETURN/ACCEPT/DROP), which the kernel stores as verdicts we write.
Chains: builtin chains at their hook offsets, user chains as an ERROR entry naming
the chain, its rules and a RETURN entry; new chains go in name order, as libiptc
writes them, so iptables-legacy-save / -S see an ordinary table.
"""

from __future__ import annotations

import bisect
import dataclasses
import errno
import functools
import shlex
import socket
import struct
import time
from collections.abc import Iterable

import numpy as np

from kernel import xtables

ENTRY = 112  # sizeof(struct ipt_entry)
ERROR_ENTRY = 176  # entry + xt_error_target
STD_ENTRY = 152  # entry + xt_standard_target
VERDICTS = {"ACCEPT": -2, "DROP": -1, "RETURN": -5}  # -NF_ACCEPT-1, -NF_DROP-1, XT_RETURN
EXTENSION_TARGETS = {"DNAT", "SNAT", "MASQUERADE", "MARK", "REJECT", "LOG", "CONNMARK", "REDIRECT", "NOTRACK",
                     "CT"}


class BlobError(RuntimeError):
    """The edit cannot be applied to the table as it is (a rule to delete is missing, ...)."""


def _header(target_offset: int, next_offset: int) -> bytes:
    return bytes(84) + struct.pack("<IHHI16x", 0, target_offset, next_offset, 0)


def standard_target(verdict: int) -> bytes:
    return struct.pack("<H29sBi4x", 40, b"", 0, verdict)


def error_entry(name: str) -> bytes:
    """A user chain's head (iptables' ERROR target carrying the chain name)."""
    return _header(ENTRY, ERROR_ENTRY) + struct.pack("<H29sB30s2x", 64, b"ERROR", 0, name.encode())


RETURN_ENTRY = _header(ENTRY, STD_ENTRY) + standard_target(VERDICTS["RETURN"])


@dataclasses.dataclass(frozen=True)
class Encoded:
    """One rule as kernel bytes; `jump` names the chain whose offset goes at `verdict_at`."""

    data: bytes
    jump: str | None = None

    @property
    def verdict_at(self) -> int:
        return struct.unpack_from("<H", self.data, 88)[0] + 32


@functools.lru_cache(maxsize=4096)
def encode(spec: str) -> Encoded:
    """An iptables rule spec (the text after `-A CHAIN`) as an ipt_entry, exactly as iptables writes it."""
    from netproxy.iptables.libiptc import to_rule

    toks = shlex.split(spec)
    if "-j" not in toks:
        raise BlobError(f"no target in {spec!r}")
    j = toks.index("-j")
    target = toks[j + 1]
    if target in EXTENSION_TARGETS:
        rule = to_rule(spec)
        rule.final_check()
        return Encoded(bytes(rule.rule))
    # matches through python-iptables (ACCEPT as a stand-in target), then our standard target
    head = toks[:j] + ["-j", "ACCEPT"] + toks[j + 2:]
    rule = to_rule(shlex.join(head))
    rule.final_check()
    raw = bytearray(rule.rule)
    target_offset = struct.unpack_from("<H", raw, 88)[0]
    data = bytearray(raw[:target_offset]) + standard_target(VERDICTS.get(target, 0))
    struct.pack_into("<H", data, 90, len(data))  # next_offset
    return Encoded(bytes(data), None if target in VERDICTS else target)


# What an edit puts in place: rules, complete entries already linked, ("chain", name) markers
Entry = Encoded | bytes | tuple[str, str]


@dataclasses.dataclass
class _Edit:
    start: int
    end: int
    entries: list[Entry]


class XtTable:
    """One legacy table of the calling thread's netns, kept as bytes plus an index between changes."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._blob: bytearray | None = None  # 96 spare bytes, the table (counters, comefrom zeroed), slack
        self._spare: bytearray | None = None  # the other buffer: reads and new tables go there
        self._size = 0
        self._eoff = np.zeros(0, np.int64)  # entry offsets
        self._jpos = np.zeros(0, np.int64)  # positions of jump verdicts (>= 0)
        # chains by id: head (ERROR entry, or first rule of a builtin chain) and end (next chain's head)
        self._ids: dict[str, int] = {}
        self._head = np.zeros(0, np.int64)
        self._end = np.zeros(0, np.int64)
        self._isuser = np.zeros(0, bool)
        self._names: list[str | None] = []  # by id; None once deleted
        self._sorted: list[str] = []  # user chains by name (= blob order, as libiptc writes them)
        self._table_end = 0  # offset of the final ERROR entry
        self._hooks: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())
        self._valid_hooks = 0
        self.reparsed = 0  # how often the index was rebuilt from the kernel (drift, first use)
        self.timing: dict[str, float] = {}  # last change: read (GET + compare or reparse), replace, total

    @property
    def _table(self) -> bytearray:
        """The table as last read (every change reads it first)."""
        if self._blob is None:
            raise BlobError(f"{self.name}: not read yet")
        return self._blob

    # -- reading -----------------------------------------------------------------------------
    def _buffer(self, size: int) -> bytearray:
        """A buffer for 96 + size bytes: the spare one if big enough, else a new one with slack."""
        buf, self._spare = self._spare, None
        if buf is None or len(buf) < 96 + size:
            buf = bytearray((96 + size + size // 8 + 7) & ~7)
        return buf

    def _fetch(self, sock: socket.socket) -> xtables.TableInfo:
        info = xtables.get_info(sock, self.name)
        fresh = self._buffer(info.size)
        xtables.get_entries_into(sock, info, fresh)
        old = self._blob
        same = (old is not None and info.size == self._size and info.num_entries == len(self._eoff)
                and (info.hook_entry, info.underflow) == self._hooks)
        if same and old is not None:
            self._normalize(fresh, self._eoff)
            n = info.size // 8
            same = np.array_equal(np.frombuffer(fresh, np.uint64, n, 96),
                                  np.frombuffer(old, np.uint64, n, 96))
        if same:
            self._spare = fresh
        else:
            self._spare = self._blob
            self._parse(fresh, info)
        return info

    @staticmethod
    def _normalize(blob: bytearray, eoff: np.ndarray) -> None:
        """Zero what the kernel fills in (counters, comefrom) so two reads of one ruleset compare equal."""
        u64 = np.frombuffer(blob, np.uint64)
        base = (eoff + 96) // 8
        u64[base + 12] = 0  # counters at entry + 96 and + 104 (plus the 96-byte header room)
        u64[base + 13] = 0
        np.frombuffer(blob, np.uint32)[(eoff + 96 + 92) // 4] = 0

    def _parse(self, blob: bytearray, info: xtables.TableInfo) -> None:
        self.reparsed += 1
        mv = memoryview(blob)[96:96 + info.size]
        offs = []
        off, size = 0, info.size
        unpack = struct.Struct("<H").unpack_from
        while off < size:
            offs.append(off)
            off += unpack(mv, off + 90)[0]
        eoff = np.array(offs, np.int64)
        self._normalize(blob, eoff)
        arr = np.frombuffer(blob, np.uint8)
        tof = arr[eoff + 96 + 88].astype(np.int64) | (arr[eoff + 96 + 89].astype(np.int64) << 8)
        tpos = eoff + tof
        std = arr[tpos + 96 + 2] == 0
        verdict = np.frombuffer(blob, np.int32)[(tpos + 96 + 32) // 4]
        jpos = (tpos + 32)[std & (verdict >= 0)]
        is_err = ((arr[tpos + 96 + 2] == ord("E")) & (arr[tpos + 96 + 3] == ord("R"))
                  & (arr[tpos + 96 + 6] == ord("R")))
        heads = {int(h): (i, True) for i, h in enumerate(info.hook_entry) if info.valid_hooks & (1 << i)}
        names = {0: "PREROUTING", 1: "INPUT", 2: "FORWARD", 3: "OUTPUT", 4: "POSTROUTING"}
        chains: list[tuple[int, str, bool]] = [(h, names[i], False) for h, (i, _) in heads.items()]
        for e in eoff[is_err]:
            e = int(e)
            name = bytes(mv[e + ENTRY + 32:e + ENTRY + 62]).split(b"\0", 1)[0].decode()
            chains.append((e, name, True))
        chains.sort()
        if not chains or chains[-1][1] != "ERROR":
            raise BlobError(f"{self.name}: table does not end with the ERROR entry")
        self._blob, self._size = blob, info.size
        self._eoff, self._jpos = eoff, jpos
        self._ids = {name: i for i, (_, name, _) in enumerate(chains[:-1])}
        self._head = np.array([c[0] for c in chains[:-1]], np.int64)
        self._end = np.array([c[0] for c in chains[1:]], np.int64)
        self._isuser = np.array([c[2] for c in chains[:-1]], bool)
        self._names = [c[1] for c in chains[:-1]]
        self._sorted = sorted(name for _, name, user in chains[:-1] if user)
        self._table_end = chains[-1][0]
        self._hooks = (info.hook_entry, info.underflow)
        self._valid_hooks = info.valid_hooks

    def _chain_span(self, chain: str) -> tuple[int, int, int]:
        """(head, first rule, tail entry) of a chain; tail is its RETURN / policy entry."""
        i = self._ids.get(chain)
        if i is None:
            raise BlobError(f"{self.name}: no chain {chain}")
        head = int(self._head[i])
        return head, head + (ERROR_ENTRY if self._isuser[i] else 0), int(self._end[i]) - STD_ENTRY

    def _first_rule(self, chain: str) -> int:
        return self._chain_span(chain)[1]

    def has_chain(self, chain: str) -> bool:
        return chain in self._ids

    def chains(self) -> list[str]:
        """Our view of the table's user chains (name order)."""
        return list(self._sorted)

    # -- editing -----------------------------------------------------------------------------
    def _find_rule(self, chain: str, spec: str) -> tuple[int, int]:
        enc = encode(spec)
        data = bytearray(enc.data)
        if enc.jump:
            struct.pack_into("<i", data, enc.verdict_at, self._first_rule(enc.jump))
        _, first, tail = self._chain_span(chain)
        blob, body = self._table, bytes(data[ENTRY:])
        at = first + 96
        while True:
            hit = blob.find(body, at + ENTRY, tail + 96 + ENTRY)
            if hit < 0:
                raise BlobError(f"{self.name}: rule not in {chain}: {spec}")
            e = hit - ENTRY
            if blob[e:e + 92] == data[:92]:
                start = e - 96
                i = int(np.searchsorted(self._eoff, start))
                if i < len(self._eoff) and self._eoff[i] == start:
                    return start, start + len(data)
            at = hit - ENTRY + 8

    def apply(self, sock: socket.socket, ops: Iterable[tuple[str, ...]]) -> int:
        """Apply partial_ops-style operations in one SET_REPLACE. Returns the number of rules written.

        The kernel refuses the replace (EAGAIN) if another writer changed the table since our
        read; then it is read again and the edit redone once."""
        ops = list(ops)
        try:
            return self._apply(sock, ops)
        except xtables.XtablesError as e:
            if e.errno != errno.EAGAIN:
                raise
            return self._apply(sock, ops)

    def _apply(self, sock: socket.socket, ops: list[tuple[str, ...]]) -> int:
        t0 = time.perf_counter()
        self._fetch(sock)
        self.timing = {"read": time.perf_counter() - t0, "replace": 0.0}
        t0 = time.perf_counter()
        declared: dict[str, list[str]] = {}
        deleted: set[str] = set()
        inserts: dict[int, list[Entry]] = {}  # position -> entries
        deletes: list[tuple[int, int]] = []
        written = 0
        for o in ops:
            verb, chain = o[0], o[1]
            if verb == "declare":
                declared.setdefault(chain, [])
            elif verb == "-X":
                deleted.add(chain)
            elif verb in ("-A", "-I") and chain in declared:
                declared[chain].append(o[2])
                written += 1
            elif verb == "-A":
                inserts.setdefault(self._chain_span(chain)[2], []).append(encode(o[2]))
                written += 1
            elif verb == "-I":
                inserts.setdefault(self._first_rule(chain), []).insert(0, encode(o[2]))
                written += 1
            elif verb == "-D":
                deletes.append(self._find_rule(chain, o[2]))
            else:
                raise BlobError(f"unknown operation {o!r}")
        edits: list[_Edit] = [_Edit(s, e, []) for s, e in deletes]
        edits += [_Edit(p, p, entries) for p, entries in inserts.items()]
        new_chains: dict[int, list[str]] = {}
        new_bodies: dict[str, list[Entry]] = {}
        for chain in deleted:
            if self.has_chain(chain):
                head, _, tail = self._chain_span(chain)
                edits.append(_Edit(head, tail + STD_ENTRY, []))
        for chain, specs in declared.items():
            if chain in deleted:
                continue
            body: list[Entry] = [encode(s) for s in specs]
            body.append(RETURN_ENTRY)
            if self.has_chain(chain):
                _, first, tail = self._chain_span(chain)
                edits.append(_Edit(first, tail + STD_ENTRY, body))
            else:
                k = bisect.bisect_right(self._sorted, chain)
                pos = self._chain_span(self._sorted[k])[0] if k < len(self._sorted) else self._table_end
                new_chains.setdefault(pos, []).append(chain)
                new_bodies[chain] = body
        for pos, names in new_chains.items():
            entries: list[Entry] = []
            for chain in sorted(names):
                entries.append(("chain", chain))
                entries.extend(new_bodies[chain])
            edits.append(_Edit(pos, pos, entries))
        self._commit(sock, edits)
        self.timing["total"] = self.timing["read"] + time.perf_counter() - t0
        return written

    def _commit(self, sock: socket.socket, edits: list[_Edit]) -> None:
        if not edits:
            return
        # insertions at a point go before a deletion starting there; merge same-point insertions
        merged: dict[tuple[int, int], _Edit] = {}
        for e in sorted(edits, key=lambda e: (e.start, e.end)):
            key = (e.start, e.end)
            if key in merged and e.start == e.end:
                merged[key].entries.extend(e.entries)
            elif key in merged:
                raise BlobError(f"{self.name}: two edits of one range")
            else:
                merged[key] = e
        edits = list(merged.values())
        for before, after in zip(edits, edits[1:], strict=False):
            if after.start < before.end:
                raise BlobError(f"{self.name}: overlapping edits")
        old, old_size = self._table, self._size
        starts = np.array([e.start for e in edits], np.int64)
        ends = np.array([e.end for e in edits], np.int64)
        zero_len = starts == ends
        # lay out the new entries (sizes are known before any jump is resolved)
        new_chain_at: dict[str, int] = {}
        new_chain_end: dict[str, int] = {}
        delta = np.zeros(len(edits) + 1, np.int64)
        datas: list[list[bytes]] = []
        new_entries: list[tuple[int, Encoded | bytes]] = []  # (new offset, entry)
        pieces: list[tuple[int, int]] = []
        prev, shift = 0, 0
        for k, e in enumerate(edits):
            pieces.append((prev, e.start))
            pos = e.start + shift
            chunk: list[bytes] = []
            open_chain = None
            for ent in e.entries:
                if isinstance(ent, tuple):
                    if open_chain:
                        new_chain_end[open_chain] = pos
                    open_chain = ent[1]
                    new_chain_at[ent[1]] = pos
                    ent = error_entry(ent[1])
                data = ent.data if isinstance(ent, Encoded) else ent
                new_entries.append((pos, ent))
                chunk.append(data)
                pos += len(data)
            if open_chain:
                new_chain_end[open_chain] = pos
            datas.append(chunk)
            shift = pos - e.end
            delta[k + 1] = shift
            prev = e.end
        pieces.append((prev, old_size))
        new_size = old_size + shift

        def map_pos(p: np.ndarray, jump: bool) -> np.ndarray:
            """Old offsets → new: shift by every edit wholly before p (a jump to p lands on
            anything inserted at p; a chain head at p moves behind chains inserted at p)."""
            k = np.searchsorted(ends, p, side="right")
            if jump:
                at = np.searchsorted(starts, p, side="left")
                hit = (at < len(starts)) & (at < k)
                last = np.minimum(at, len(starts) - 1)
                hit &= zero_len[last] & (starts[last] == p)
                k = k - hit
            return p + delta[k]

        def inside(p: np.ndarray) -> np.ndarray:
            k = np.searchsorted(starts, p, side="right") - 1
            kk = np.maximum(k, 0)
            return (k >= 0) & (p >= starts[kk]) & (p < ends[kk])

        # the new blob: untouched stretches copied, new entries between them
        out = self._buffer(new_size)
        mv_out, mv_old = memoryview(out), memoryview(old)
        cursor = 96
        for k, (a, b) in enumerate(pieces):
            mv_out[cursor:cursor + b - a] = mv_old[96 + a:96 + b]
            cursor += b - a
            for data in datas[k] if k < len(datas) else ():
                mv_out[cursor:cursor + len(data)] = data
                cursor += len(data)
        del mv_out, mv_old
        if cursor != 96 + new_size:
            raise BlobError(f"{self.name}: layout mismatch")
        # existing jumps re-linked, new jumps resolved
        keep_j = ~inside(self._jpos)
        jpos_old = self._jpos[keep_j]
        i32_old = np.frombuffer(old, np.int32)
        targets = i32_old[(jpos_old + 96) // 4].astype(np.int64)
        if np.any(inside(targets) & ~np.isin(targets, starts)):
            raise BlobError(f"{self.name}: a kept rule jumps into a removed chain")
        jpos_new = map_pos(jpos_old, False)
        i32 = np.frombuffer(out, np.int32)
        i32[(jpos_new + 96) // 4] = map_pos(targets, True)
        new_j = []
        for off, ent in new_entries:
            if isinstance(ent, Encoded) and ent.jump:
                if ent.jump in new_chain_at:
                    dest = new_chain_at[ent.jump] + ERROR_ENTRY
                else:
                    dest = int(map_pos(np.array([self._first_rule(ent.jump)], np.int64), True)[0])
                struct.pack_into("<i", out, 96 + off + ent.verdict_at, dest)
                new_j.append(off + ent.verdict_at)
        # entry offsets and counters
        keep_e = ~inside(self._eoff)
        eoff_kept_new = map_pos(self._eoff[keep_e], False)
        added_offs = np.array([off for off, _ in new_entries], np.int64)
        eoff_new = np.sort(np.concatenate([eoff_kept_new, added_offs]))
        valid = [bool(self._valid_hooks & (1 << i)) for i in range(5)]
        hook_entry = tuple(int(map_pos(np.array([h], np.int64), True)[0]) if v else h
                           for h, v in zip(self._hooks[0], valid, strict=True))
        underflow = tuple(int(map_pos(np.array([u], np.int64), False)[0]) if v else u
                          for u, v in zip(self._hooks[1], valid, strict=True))
        info = xtables.TableInfo(self.name, self._valid_hooks, self._hooks[0], self._hooks[1],
                                 len(self._eoff), old_size)
        t_replace = time.perf_counter()
        old_counters = xtables.replace(sock, info, out, len(eoff_new), new_size, hook_entry, underflow)
        oc = np.frombuffer(memoryview(old_counters), np.uint64).reshape(-1, 2)
        nc = np.zeros((len(eoff_new), 2), np.uint64)
        nc[np.searchsorted(eoff_new, eoff_kept_new)] = oc[keep_e]
        xtables.add_counters(sock, self.name, nc.tobytes())
        self.timing["replace"] = time.perf_counter() - t_replace
        # the index, for the next change
        gone = inside(self._head)
        self._head = map_pos(self._head, False)
        self._end = map_pos(self._end, True)
        for i in np.nonzero(gone)[0]:
            name = self._names[i]
            if name is not None:
                self._names[i] = None
                del self._ids[name]
                if self._isuser[i]:
                    del self._sorted[bisect.bisect_left(self._sorted, name)]
        if new_chain_at:
            base = len(self._head)
            names = list(new_chain_at)
            self._head = np.concatenate([self._head, np.array([new_chain_at[n] for n in names], np.int64)])
            self._end = np.concatenate([self._end, np.array([new_chain_end[n] for n in names], np.int64)])
            self._isuser = np.concatenate([self._isuser, np.ones(len(names), bool)])
            for k, name in enumerate(names):
                self._ids[name] = base + k
                self._names.append(name)
                bisect.insort(self._sorted, name)
        if len(self._names) > 2 * len(self._ids) + 64:  # drop deleted chains' ids
            live = np.array(sorted(self._ids.values()), np.int64)
            self._head, self._end, self._isuser = self._head[live], self._end[live], self._isuser[live]
            self._names = [self._names[i] for i in live]
            self._ids = {n: k for k, n in enumerate(self._names) if n is not None}  # (all are)
        self._table_end = int(map_pos(np.array([self._table_end], np.int64), False)[0])
        self._spare, self._blob, self._size = old, out, new_size
        self._eoff = eoff_new
        self._jpos = np.sort(np.concatenate([jpos_new, np.array(new_j, np.int64)]))
        self._hooks = (hook_entry, underflow)
