"""CSI: the Container Storage Interface (spec v1.12.0, `csi/proto/csi.proto`).

`csi.driver` is a hostpath-style driver (`nodeagent csi`) serving the spec's Identity, Controller and Node
services on a unix socket; `csi.registrar` is node-driver-registrar's part (the kubelet's plugin
registration socket); `csi.client` is how the kubelet and the provisioner call a driver. This package uses
only the kernel layer, so any CSI driver can stand in for ours and ours can serve any CO.
"""
