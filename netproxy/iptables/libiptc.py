"""Applying small iptables changes in-process through python-iptables (libiptc, legacy x_tables).

Measured against iptables-restore in bench/netproxy_sync.py (mode iptables-libiptc):
no fork/exec and no text parsing, but libiptc still fetches and rewrites the whole
table on commit, like legacy iptables-restore. Each call opens and frees the
handle on the calling thread, so the netns of the proxier's worker thread is used
(libiptc keeps one process-wide socket while a handle is open).
"""

from __future__ import annotations

import importlib
import shlex
from collections.abc import Iterable, Mapping

from netproxy.iptables.plan import PortRules, partial_ops
from netproxy.model import ServicePortName
from netproxy.proxier import NodeConfig


def load_iptc() -> None:
    """Import python-iptables without setuptools. It asks for `distutils`, and setuptools' distutils shim
    would answer by importing all of setuptools (+14 MiB of RSS), logging while it holds the global
    import lock (a deadlock if another thread forks then: os.fork takes logging's lock, then the import
    lock). The standard library's distutils (3.11) is all it needs, so the shim is taken out first."""
    try:
        importlib.import_module("_distutils_hack").remove_shim()
    except (ImportError, AttributeError):
        pass
    import iptc  # noqa: F401


def to_rule(spec: str):
    """An iptables rule spec (`-m tcp -p tcp --dport 80 -j X`) as a python-iptables Rule."""
    import iptc

    toks = shlex.split(spec)
    rule = iptc.Rule()
    cur = None
    neg = ""
    i = 0
    while i < len(toks):
        t = toks[i]
        if t == "!":
            neg = "!"
            i += 1
            continue
        if t in ("-m", "-j"):
            cur = rule.create_match(toks[i + 1]) if t == "-m" else rule.create_target(toks[i + 1])
            i += 2
            continue
        if t in ("-p", "-s", "-d"):
            setattr(rule, {"-p": "protocol", "-s": "src", "-d": "dst"}[t], neg + toks[i + 1])
            neg = ""
            i += 2
            continue
        if t.startswith("--"):
            j = i + 1
            vals = []
            while j < len(toks) and not toks[j].startswith("-") and toks[j] != "!":
                vals.append(toks[j])
                j += 1
            if cur is None:
                raise ValueError(f"option {t} before any -m/-j in {spec!r}")
            cur.parse(t[2:], neg + " ".join(vals))
            neg = ""
            i = j
            continue
        raise ValueError(f"cannot parse {t!r} in {spec!r}")
    return rule


def apply_partial(old: Mapping[ServicePortName, PortRules], new: Mapping[ServicePortName, PortRules],
                  changed: Iterable[ServicePortName], node: NodeConfig) -> int:
    """Apply `partial_ops` with libiptc, one commit per table. Returns the number of rules added."""
    import iptc

    added = 0
    # python-iptables checks every new target against its cached filter Table, so both handles
    # must be open while rules are built; closing both at the end frees libiptc's socket.
    tables = {name: iptc.Table(name, autocommit=False) for name in ("filter", "nat")}
    for t in tables.values():
        t.autocommit = False
        t.refresh()
    try:
        for table_name, ops in partial_ops(old, new, changed).items():
            table = tables[table_name]
            for o in ops:
                verb, chain = o[0], o[1]
                if verb == "declare":
                    if table.is_chain(chain):
                        table.flush_entries(chain)
                    else:
                        table.create_chain(chain)
                elif verb == "-X":
                    table.delete_chain(chain)
                elif verb == "-D":
                    iptc.Chain(table, chain).delete_rule(to_rule(o[2]))
                elif verb == "-I":
                    iptc.Chain(table, chain).insert_rule(to_rule(o[2]))
                    added += 1
                else:
                    iptc.Chain(table, chain).append_rule(to_rule(o[2]))
                    added += 1
            table.commit()
    finally:
        for t in tables.values():
            t.close()
    return added
