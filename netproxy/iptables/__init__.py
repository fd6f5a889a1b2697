"""iptables mode: kube-proxy's nat layout, written with iptables-restore (and libiptc for small changes)."""
