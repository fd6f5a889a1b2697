"""The embedded components' path to their own process's apiserver: a root-only Unix socket beside its
HTTPS port, served by the same handler chain (authentication by the component's own token, RBAC,
admission, max-in-flight, metrics), without TLS and TCP. kube-apiserver's loopback client config is the
model: a privileged in-process path that still carries a credential.

The apiserver names the socket in the kubeconfigs it writes for its components, as a cluster extension
(kubectl and client-go keep unknown extensions and ignore them, as they do minikube's `cluster_info`), so
the same file still works over HTTPS for every other client, and for a component that cannot open the
socket."""

from __future__ import annotations

import os
import stat
from typing import Any

EXTENSION = "nodeagent.io/local-apiserver"
# the host a request over the socket names (no TLS: no certificate to match)
BASE_URL = "http://localhost"


def extension(path: str) -> dict[str, Any]:
    """The cluster extension naming the socket at `path`, for a kubeconfig's cluster entry."""
    return {"name": EXTENSION, "extension": {"socket": path}}


def usable(cluster: dict[str, Any]) -> str | None:
    """The socket a kubeconfig's cluster entry names, when it is a socket this process may connect to;
    else None (the server's URL, HTTPS, is used)."""
    for ext in cluster.get("extensions") or ():
        if not isinstance(ext, dict) or ext.get("name") != EXTENSION:
            continue
        path = (ext.get("extension") or {}).get("socket")
        if not isinstance(path, str) or not path:
            return None
        try:
            if not stat.S_ISSOCK(os.stat(path).st_mode):
                return None
        except OSError:
            return None
        return path if os.access(path, os.R_OK | os.W_OK) else None
    return None
