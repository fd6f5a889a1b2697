"""Service load balancing through iptables, nftables and IPVS, like kube-proxy."""
