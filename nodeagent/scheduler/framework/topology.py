"""Counts per topology domain, the (topologyKey, value) pairs InterPodAffinity and PodTopologySpread
both keep: a node belongs to the domain named by its value for the key, and to none when it lacks
the label. One place for adding to and reading those counts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

Pair = tuple[str, str]
PairCounts = dict[Pair, int]


def bump(counts: PairCounts, key: str, labels: Mapping[str, str], n: int = 1) -> None:
    """Add `n` to the node's domain for `key` (nothing when the node has no such label); a count
    that reaches zero is dropped, so `bool(counts)` says whether any domain is occupied."""
    v = labels.get(key)
    if v is None:
        return
    k = (key, v)
    c = counts.get(k, 0) + n
    if c:
        counts[k] = c
    else:
        counts.pop(k, None)


def count_at(counts: PairCounts, key: str, labels: Mapping[str, str]) -> int:
    """The count of the node's domain for `key` (0 when the node has no such label)."""
    v = labels.get(key)
    return 0 if v is None else counts.get((key, v), 0)


def sum_at(counts: PairCounts, keys: Iterable[str], labels: Mapping[str, str]) -> int:
    """The node's domain counts summed over `keys` (a score over several topology keys)."""
    s = 0
    for k in keys:
        v = labels.get(k)
        if v is not None:
            s += counts.get((k, v), 0)
    return s
