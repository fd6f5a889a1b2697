"""Which API credential a component uses: one rule for every part of `up`, `agent` and `server`.

Control-plane parts (scheduler, controllers, DNS) run beside the apiserver and use the admin
kubeconfig it writes under the data dir. Node parts (kubelet, netproxy, netpol) use the node's own
credential when the node joined (`agent`), else an explicit kubeconfig or --server/--token, else the
same admin kubeconfig (`up`, where the node and the server are one process).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodeagent.client.rest import Client

DEFAULT_DATA_DIR = "/var/lib/nodeagent"


def admin_kubeconfig(config: Any) -> Path:
    return Path(getattr(config, "data_dir", None) or DEFAULT_DATA_DIR, "admin.kubeconfig")


def node_client(config: Any) -> Client:
    """The node's own credential (a joined `agent`) first, then a kubeconfig, --server/--token, `up`'s admin."""
    kubeconfig = getattr(config, "node_kubeconfig", None) or getattr(config, "kubeconfig", None)
    if kubeconfig:
        return Client.from_kubeconfig(kubeconfig)
    server = getattr(config, "server", None)
    if server:
        return Client(server, getattr(config, "token", None) or None, insecure=True)
    return Client.from_kubeconfig(admin_kubeconfig(config))
