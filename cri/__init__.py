"""The container runtime and its CRI runtime.v1 gRPC server."""
