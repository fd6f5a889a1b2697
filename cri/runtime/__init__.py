"""The container runtime as a library: sandboxes, containers, cgroups, mounts, processes.

The CRI server (cri/server/) is a thin gRPC layer over `cri.runtime.service.Runtime`; tests and
benchmarks can drive the runtime directly.
"""
