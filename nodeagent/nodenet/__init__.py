"""Cross-node pod networking: host-gw, ipip and vxlan backends, chosen on the server, carried by Node objects.

The server's `podnetwork` controller stamps every Node with the backend and the cluster CIDR; each agent's
`nodenet` component publishes its own underlay address, pod subnet (and VTEP MAC for vxlan) on its Node and
programs routes / FDB / neighbour entries for every other node (`plan` decides, `dataplane` applies).
"""
