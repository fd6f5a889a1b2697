"""The Node annotations the backends travel in (flannel's backend-type / public-ip / backend-data)."""

from __future__ import annotations

PREFIX = "nodenet.nodeagent.io/"
BACKEND = PREFIX + "backend-type"  # set by the server: host-gw | ipip | vxlan
CLUSTER_CIDR = PREFIX + "cluster-cidr"  # set by the server: the whole pod range (masquerade boundary)
PUBLIC_IP = PREFIX + "public-ip"  # set by the node: its underlay address
POD_CIDR = PREFIX + "pod-cidr"  # set by the node only under --pod-subnet: the subnet its bridge uses instead
# of spec.podCIDR
VTEP_MAC = PREFIX + "vtep-mac"  # set by the node (vxlan): its VTEP's MAC

MODES = ("host-gw", "ipip", "vxlan")
