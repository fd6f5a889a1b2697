"""Admin kubeconfig: the cluster's CA, the server URL and the admin bearer token, written atomically
(0600); and its entries merged into a person's own kubeconfig (`~/.kube/config`), as kind and k3s
do, so that plain `kubectl` works the moment the cluster is up."""

from __future__ import annotations

import base64
import dataclasses
import os
from pathlib import Path
from typing import Any

import yaml

from kernel.fs import atomic_write
from nodeagent.client import local_socket


def render(server: str, ca_pem: bytes, token: str, name: str = "nodeagent", user: str = "admin",
           local_socket_path: str | None = None) -> str:
    """`local_socket_path`: the apiserver's local socket, named for our own client (an embedded
    component's kubeconfig); every other client reads `server`."""
    cluster: dict[str, Any] = {"server": server,
                               "certificate-authority-data": base64.b64encode(ca_pem).decode()}
    if local_socket_path:
        cluster["extensions"] = [local_socket.extension(local_socket_path)]
    cfg = {
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": user}}],
        "current-context": name,
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text, 0o600)


@dataclasses.dataclass(frozen=True)
class UserKubeconfig:
    """Where a person's kubeconfig is, who owns it, and the name its nodeagent entries carry."""

    path: str
    context: str = "nodeagent"
    uid: int | None = None  # chown the file (and a ~/.kube made for it) to this user: sudo's invoker
    gid: int | None = None


class KubeconfigError(ValueError):
    """A person's kubeconfig that cannot be merged into (not YAML, not a Config); it is left as it is."""


def merge(existing: str | None, admin: str, context: str) -> str:
    """`existing` with a cluster, user and context named `context` holding the admin kubeconfig's
    (replacing entries of that name, keeping every other), and `current-context` set to it only when
    the file had none: a person's own choice of context is theirs."""
    ours = yaml.safe_load(admin)
    cluster = ours["clusters"][0]["cluster"]
    user = ours["users"][0]["user"]
    cfg: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "preferences": {}}
    if existing and existing.strip():
        try:
            loaded = yaml.safe_load(existing)
        except yaml.YAMLError as e:
            raise KubeconfigError(f"not YAML: {e}") from None
        if not isinstance(loaded, dict) or loaded.get("kind", "Config") != "Config":
            raise KubeconfigError("not a kubeconfig (kind: Config)")
        cfg = loaded
    for key, entry in (("clusters", {"name": context, "cluster": cluster}),
                       ("users", {"name": context, "user": user}),
                       ("contexts", {"name": context, "context": {"cluster": context, "user": context}})):
        entries = [e for e in cfg.get(key) or [] if isinstance(e, dict) and e.get("name") != context]
        cfg[key] = [*entries, entry]
    if not cfg.get("current-context"):
        cfg["current-context"] = context
    return yaml.safe_dump(cfg, sort_keys=False)


def unmerge(existing: str, context: str) -> str | None:
    """`existing` without the cluster, user and context named `context` (and without `current-context`
    when it named it); None when it holds none of them, so the file is left untouched."""
    try:
        cfg = yaml.safe_load(existing)
    except yaml.YAMLError as e:
        raise KubeconfigError(f"not YAML: {e}") from None
    if not isinstance(cfg, dict) or cfg.get("kind", "Config") != "Config":
        raise KubeconfigError("not a kubeconfig (kind: Config)")
    changed = False
    for key in ("clusters", "users", "contexts"):
        entries = [e for e in cfg.get(key) or [] if not (isinstance(e, dict) and e.get("name") == context)]
        if len(entries) != len(cfg.get(key) or []):
            cfg[key], changed = entries, True
    if cfg.get("current-context") == context:
        cfg.pop("current-context")
        changed = True
    return yaml.safe_dump(cfg, sort_keys=False) if changed else None


def remove_for_user(target: UserKubeconfig) -> bool:
    """Take the cluster's entries out of `target` (its mode and owner kept); True when there were any."""
    path = Path(target.path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return False
    left = unmerge(text, target.context)
    if left is None:
        return False
    st = path.stat()
    atomic_write(path, left, st.st_mode & 0o777)
    os.chown(path, st.st_uid, st.st_gid)
    return True


def write_for_user(target: UserKubeconfig, admin: str) -> bool:
    """Merge the admin kubeconfig into `target` (made 0600 if absent, keeping its mode if present),
    owned by the target's user; True when the file was made rather than merged into."""
    path = Path(target.path)
    made = not path.exists()
    merged = merge(None if made else path.read_text(), admin, target.context)
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, mode=0o700)
        _chown(path.parent, target)
    mode = 0o600 if made else path.stat().st_mode & 0o777
    atomic_write(path, merged, mode)
    _chown(path, target)
    return made


def _chown(path: Path, target: UserKubeconfig) -> None:
    if target.uid is not None:
        os.chown(path, target.uid, target.gid if target.gid is not None else -1)
