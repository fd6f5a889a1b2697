"""A hostpath-style CSI driver (kubernetes-csi's csi-driver-host-path, on this node's disk).

`state` keeps volumes and snapshots durably; `controller` and `node` are the spec's Controller and Node
services on plain values, raising `CSIError` with the spec's codes; `server` is the one gRPC boundary.
"""
