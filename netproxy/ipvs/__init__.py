"""ipvs mode: kube-ipvs0 dummy device, IPVS virtual servers over netlink, ipset-based masquerade."""
