"""Admin kubeconfig: the cluster's CA, the server URL and the admin bearer token, written atomically (0600)."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import yaml


def render(server: str, ca_pem: bytes, token: str, name: str = "nodeagent") -> str:
    cfg = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": server,
                                                "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": "admin"}}],
        "current-context": name,
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
