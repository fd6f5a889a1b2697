"""Joining a node: bootstrap tokens, the signed cluster-info, CA pinning and the node's own client certificate."""
