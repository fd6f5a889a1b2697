"""nftables mode: one `ip kube-proxy` table written through hand-built nf_tables netlink batches."""
