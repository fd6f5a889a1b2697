"""Eviction thresholds in the kubelet's flag syntax (pkg/kubelet/eviction/api, ParseThresholdConfig).

    --eviction-hard=memory.available<500Mi,nodefs.available<10%
    --eviction-soft=memory.available<1Gi   --eviction-soft-grace-period=memory.available=1m30s
    --eviction-minimum-reclaim=memory.available=0Mi,nodefs.available=500Mi
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction

from nodeagent.api.quantity import QuantityError, parse_quantity

MEMORY_AVAILABLE = "memory.available"
ALLOCATABLE_MEMORY_AVAILABLE = "allocatableMemory.available"
NODEFS_AVAILABLE = "nodefs.available"
NODEFS_INODES_FREE = "nodefs.inodesFree"
IMAGEFS_AVAILABLE = "imagefs.available"
IMAGEFS_INODES_FREE = "imagefs.inodesFree"
CONTAINERFS_AVAILABLE = "containerfs.available"
CONTAINERFS_INODES_FREE = "containerfs.inodesFree"
PID_AVAILABLE = "pid.available"

SIGNALS = (MEMORY_AVAILABLE, ALLOCATABLE_MEMORY_AVAILABLE, NODEFS_AVAILABLE, NODEFS_INODES_FREE,
           IMAGEFS_AVAILABLE, IMAGEFS_INODES_FREE, CONTAINERFS_AVAILABLE, CONTAINERFS_INODES_FREE,
           PID_AVAILABLE)

# signal → the resource it starves (signalToResource) and the node condition it raises
SIGNAL_RESOURCE = {MEMORY_AVAILABLE: "memory", ALLOCATABLE_MEMORY_AVAILABLE: "memory",
                   NODEFS_AVAILABLE: "ephemeral-storage", NODEFS_INODES_FREE: "inodes",
                   IMAGEFS_AVAILABLE: "ephemeral-storage", IMAGEFS_INODES_FREE: "inodes",
                   CONTAINERFS_AVAILABLE: "ephemeral-storage", CONTAINERFS_INODES_FREE: "inodes",
                   PID_AVAILABLE: "pids"}
SIGNAL_CONDITION = {MEMORY_AVAILABLE: "MemoryPressure", ALLOCATABLE_MEMORY_AVAILABLE: "MemoryPressure",
                    NODEFS_AVAILABLE: "DiskPressure", NODEFS_INODES_FREE: "DiskPressure",
                    IMAGEFS_AVAILABLE: "DiskPressure", IMAGEFS_INODES_FREE: "DiskPressure",
                    CONTAINERFS_AVAILABLE: "DiskPressure", CONTAINERFS_INODES_FREE: "DiskPressure",
                    PID_AVAILABLE: "PIDPressure"}
CONDITION_TAINT = {"MemoryPressure": "node.kubernetes.io/memory-pressure",
                   "DiskPressure": "node.kubernetes.io/disk-pressure",
                   "PIDPressure": "node.kubernetes.io/pid-pressure"}

# kubelet's defaults for --eviction-hard on Linux
DEFAULT_HARD = "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%"


class ThresholdError(ValueError):
    """A flag value the kubelet would refuse at startup."""


@dataclasses.dataclass(frozen=True)
class Value:
    """An absolute quantity or a fraction of capacity (0.1 for "10%")."""

    quantity: Fraction | None = None
    percentage: float = 0.0

    def resolve(self, capacity: Fraction | int) -> Fraction:
        """GetThresholdQuantity: the absolute amount for this capacity (percentages truncated to whole
        units)."""
        if self.quantity is not None:
            return self.quantity
        return Fraction(math.floor(float(capacity) * self.percentage))

    def __str__(self) -> str:
        if self.quantity is not None:
            return str(self.quantity)
        return f"{self.percentage * 100:g}%"


@dataclasses.dataclass(frozen=True)
class Threshold:
    signal: str
    value: Value
    operator: str = "LessThan"
    grace_period: float = 0.0  # seconds; 0 for hard thresholds
    min_reclaim: Value | None = None
    soft: bool = False

    @property
    def resource(self) -> str:
        return SIGNAL_RESOURCE[self.signal]

    @property
    def condition(self) -> str:
        return SIGNAL_CONDITION[self.signal]

    def is_hard(self) -> bool:
        return self.grace_period == 0 and not self.soft


def parse_map(flag: str | Mapping[str, str] | None, sep: str) -> dict[str, str]:
    """"a<b,c<d" (sep "<") or "a=b,c=d" (sep "=") → dict; a mapping passes through."""
    if flag is None:
        return {}
    if isinstance(flag, Mapping):
        return dict(flag)
    out = {}
    for part in flag.split(","):
        part = part.strip()
        if not part:
            continue
        if sep not in part:
            raise ThresholdError(f"malformed pair, expect string{sep}string: {part!r}")
        k, _, v = part.partition(sep)
        out[k.strip()] = v.strip()
    return out


def _parse_value(signal: str, val: str, what: str) -> Value | None:
    if signal not in SIGNALS:
        raise ThresholdError(f"unsupported eviction signal {signal}")
    if val.endswith("%"):
        if val in ("0%", "100%"):
            return None  # kubelet ignores them
        try:
            pct = float(val[:-1]) / 100
        except ValueError:
            raise ThresholdError(f"invalid percentage {val!r} for {signal}") from None
        if pct < 0:
            raise ThresholdError(f"eviction percentage {what} {signal} must be >= 0%: {val}")
        if pct > 1:
            raise ThresholdError(f"eviction percentage {what} {signal} must be <= 100%: {val}")
        return Value(percentage=pct)
    try:
        q = parse_quantity(val)
    except QuantityError as e:
        raise ThresholdError(f"invalid quantity {val!r} for {signal}: {e}") from None
    if what == "threshold" and q <= 0:
        raise ThresholdError(f"eviction threshold {signal} must be positive: {val}")
    if q < 0:
        raise ThresholdError(f"negative {what} {signal}: {val}")
    return Value(quantity=q)


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(s: str) -> float:
    """A Go time.Duration string ("1m30s", "90s", "1h", "0") in seconds."""
    s = s.strip()
    if s in ("0", ""):
        return 0.0
    pos, total = 0, 0.0
    for m in _DURATION.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s):
        raise ThresholdError(f"time: invalid duration {s!r}")
    return total


def parse_thresholds(hard: str | Mapping[str, str] | None = DEFAULT_HARD,
                     soft: str | Mapping[str, str] | None = None,
                     soft_grace_period: str | Mapping[str, str] | None = None,
                     minimum_reclaim: str | Mapping[str, str] | None = None) -> list[Threshold]:
    """ParseThresholdConfig: hard thresholds, then soft ones (each needing a grace period), min-reclaims
    applied."""
    graces = {k: parse_duration(v) for k, v in parse_map(soft_grace_period, "=").items()}
    for k, g in graces.items():
        if k not in SIGNALS:
            raise ThresholdError(f"unsupported eviction signal {k}")
        if g < 0:
            raise ThresholdError(f"invalid eviction grace period specified: {g}, must be a positive value")
    reclaims = {}
    for k, v in parse_map(minimum_reclaim, "=").items():
        r = _parse_value(k, v, "minimum reclaim")
        reclaims[k] = r if r is not None else Value(quantity=Fraction(0))
    out: list[Threshold] = []
    for signal, text in parse_map(hard, "<").items():
        value = _parse_value(signal, text, "threshold")
        if value is not None:
            out.append(Threshold(signal, value, min_reclaim=reclaims.get(signal)))
    for signal, text in parse_map(soft, "<").items():
        value = _parse_value(signal, text, "threshold")
        if value is None:
            continue
        if signal not in graces:
            raise ThresholdError(f"grace period must be specified for the soft eviction threshold {signal}")
        out.append(Threshold(signal, value, grace_period=graces[signal], min_reclaim=reclaims.get(signal),
                             soft=True))
    return out


def hard_eviction_reservation(thresholds: Iterable[Threshold],
                              capacity: Mapping[str, str | int | float]) -> dict[str, Fraction]:
    """What allocatable subtracts for hard thresholds: memory.available → memory, nodefs.available →
    ephemeral-storage (hardEvictionReservation)."""
    out: dict[str, Fraction] = {}
    mapping = {MEMORY_AVAILABLE: "memory", NODEFS_AVAILABLE: "ephemeral-storage"}
    for t in thresholds:
        if not t.is_hard() or t.signal not in mapping:
            continue
        res = mapping[t.signal]
        if res not in capacity:
            continue
        out[res] = t.value.resolve(parse_quantity(capacity[res]))
    return out
