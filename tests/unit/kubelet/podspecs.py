"""Small builders for Pod/Container dicts shared by the kubelet unit tests."""

from __future__ import annotations

from typing import Any


def container(name: str = "c", requests: dict | None = None, limits: dict | None = None,
              **extra: Any) -> dict:
    c: dict[str, Any] = {"name": name, "image": "busybox"}
    res = {}
    if requests:
        res["requests"] = requests
    if limits:
        res["limits"] = limits
    if res:
        c["resources"] = res
    c.update(extra)
    return c


def pod(*containers: dict, init: list[dict] | None = None, uid: str = "1234-abcd", name: str = "p",
        namespace: str = "default", **spec: Any) -> dict:
    s: dict[str, Any] = {"containers": list(containers) or [container()]}
    if init:
        s["initContainers"] = init
    s.update(spec)
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid}, "spec": s}
