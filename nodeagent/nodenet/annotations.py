"""The Node annotations the backends travel in (flannel's backend-type / public-ip / backend-data)."""

from __future__ import annotations

PREFIX = "nodenet.nodeagent.io/"
BACKEND = PREFIX + "backend-type"  # set by the server: host-gw | ipip | vxlan | bgp
CLUSTER_CIDR = PREFIX + "cluster-cidr"  # set by the server: the whole pod range (masquerade boundary)
PUBLIC_IP = PREFIX + "public-ip"  # set by the node: its underlay address
POD_CIDR = PREFIX + "pod-cidr"  # set by the node only under --pod-subnet: the subnet its bridge uses instead
# of spec.podCIDR
VTEP_MAC = PREFIX + "vtep-mac"  # set by the node (vxlan): its VTEP's MAC

# set by the server in bgp mode: the cluster's AS, its route reflectors (node names, comma-separated; none: a
# node-to-node mesh) and the Service ClusterIP ranges announced to external peers (comma-separated)
BGP_AS = PREFIX + "bgp-as"
BGP_ROUTE_REFLECTORS = PREFIX + "bgp-route-reflectors"
BGP_SERVICE_CIDRS = PREFIX + "bgp-service-cluster-ips"
# set by the node in bgp mode: its BGP sessions as BIRD reports them (a JSON list, see nodenet.bgp)
BGP_SESSIONS = "nodeagent.io/bgp-sessions"

MODES = ("host-gw", "ipip", "vxlan", "bgp")
