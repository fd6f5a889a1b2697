"""Choosing a backend by mode name; imports stay lazy so one mode never loads another's libraries."""

from __future__ import annotations

from netproxy.proxier import NodeConfig, Proxier

MODES = ("iptables", "nftables", "ipvs")


def make_proxier(mode: str, node: NodeConfig, **options: str) -> Proxier:
    if mode == "iptables":
        return make_iptables_proxier(node, **options)
    if mode == "nftables":
        from netproxy.nftables.proxier import NftablesProxier

        return NftablesProxier(node, **options)
    if mode == "ipvs":
        from netproxy.ipvs.proxier import IpvsProxier

        return IpvsProxier(node, **options)
    raise ValueError(f"unknown proxy mode {mode!r} (one of {', '.join(MODES)})")


def make_iptables_proxier(node: NodeConfig, backend: str | None = None, **options: str) -> Proxier:
    """The iptables mode on the node's iptables backend (one for every iptables user on the node:
    kernel.iptables.backend). `backend`: "nft" (iptables-nft rules written over
    nf_tables netlink, the default where the kernel has nf_tables), "legacy" (x_tables: a streamed
    iptables-legacy-restore, libiptc or xtblob changes), "nft-restore" (the iptables-nft-restore tool,
    kept for comparison: its full loads are superlinear)."""
    if backend is None:
        from kernel import iptables

        backend = "legacy" if options.get("incremental") else iptables.backend()
    if backend == "nft":
        from netproxy.iptables.nftproxier import CHUNK, IptablesNftProxier

        chunk = options.pop("chunk", None)  # Service ports per initial-load transaction (benchmarks)
        # per-rule packet counters as iptables-nft writes them (off by default: nftrules.use_counters)
        counters = options.pop("counters", "false").lower() in ("1", "true", "yes")
        if options:
            raise ValueError(f"options {sorted(options)} apply to the legacy backend only")
        return IptablesNftProxier(node, chunk=int(chunk) if chunk else CHUNK, counters=counters)
    from netproxy.iptables.proxier import IptablesProxier

    options.pop("counters", None)  # x_tables rules always carry their counters

    return IptablesProxier(node, backend="nft" if backend == "nft-restore" else backend, **options)
