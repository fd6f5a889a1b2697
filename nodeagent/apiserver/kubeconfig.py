"""Admin kubeconfig: the cluster's CA, the server URL and the admin bearer token, written atomically
(0600)."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from kernel.fs import atomic_write


def render(server: str, ca_pem: bytes, token: str, name: str = "nodeagent") -> str:
    cfg = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": name, "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "admin"}}],
        "current-context": name,
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text, 0o600)
