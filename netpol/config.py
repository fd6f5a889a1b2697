"""The NetworkPolicy enforcer's configuration, validated when it is built (`nodeagent up` / `agent` /
`netpol` build it from their flags and the instance's layout, which names its kernel objects)."""

from __future__ import annotations

import dataclasses

from nodeagent.client.config import Credentials

MODES = ("iptables", "nftables")


@dataclasses.dataclass(frozen=True)
class NetpolConfig:
    chain_prefix: str  # iptables mode: <prefix>-FORWARD, -INGRESS, -EGRESS and the per-policy chains
    set_prefix: str  # iptables mode: the ipsets' names
    table: str  # nftables mode: table ip <table>
    mode: str = "iptables"
    node_name: str | None = None  # enforce for this node's pods (None: every pod, for --from-file)
    netns: str | None = None  # program this named network namespace instead of the process's
    min_sync_period: float = 1.0
    sync_period: float = 60.0
    credentials: Credentials | None = None  # policies, pods and namespaces from this API

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"netpol mode {self.mode!r}: one of {', '.join(MODES)}")
        if not (self.chain_prefix and self.set_prefix and self.table):
            raise ValueError("netpol: chain prefix, set prefix and table must be named")
        if self.min_sync_period < 0 or self.sync_period < 0:
            raise ValueError(f"netpol sync periods {self.min_sync_period}/{self.sync_period}: "
                             "must not be negative")
