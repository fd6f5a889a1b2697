"""Calling a CSI driver (ours or any other) on its unix socket: channels and error text.

`channel`/`aio_channel` open a channel to an endpoint (a path, or unix://path); `describe` renders a
failed call as the kubelet and the sidecars print it (`rpc error: code = NotFound desc = …`), so events
and logs read as on Kubernetes. The stubs are csi.proto's own (`csi.proto.csi_pb2_grpc`).
"""

from __future__ import annotations

import grpc

TIMEOUT = 30.0  # seconds per call (the sidecars' --timeout defaults are 10–15 s; mounts can be slower)
# gRPC's Go names for status codes, as the kubelet prints them
GO_NAMES = {c: "".join(w.capitalize() for w in c.name.split("_")) for c in grpc.StatusCode}
GO_NAMES[grpc.StatusCode.OK] = "OK"


def target(endpoint: str) -> str:
    return endpoint if endpoint.startswith("unix:") else f"unix://{endpoint}"


def channel(endpoint: str) -> grpc.Channel:
    return grpc.insecure_channel(target(endpoint))


def aio_channel(endpoint: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(target(endpoint))


def describe(e: grpc.RpcError) -> str:
    code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
    details = e.details() if hasattr(e, "details") else str(e)
    return f"rpc error: code = {GO_NAMES.get(code, code.name)} desc = {details}"


def is_code(e: BaseException, *codes: grpc.StatusCode) -> bool:
    return isinstance(e, grpc.RpcError) and hasattr(e, "code") and e.code() in codes
