"""The CRI runtime.v1 gRPC server: a thin layer over cri.runtime, one module per verb group."""
