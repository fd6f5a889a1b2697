"""The kubelet's Node API: `start(...)` brings up the HTTPS server the apiserver proxies logs/exec/stats
to."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from nodeagent.kubelet.server.app import DEFAULT_PORT, KubeletServer, ServerDeps
from nodeagent.kubelet.server.auth import Authenticator
from nodeagent.kubelet.server.tls import server_context, serving_cert

__all__ = ["DEFAULT_PORT", "KubeletServer", "ServerDeps", "start"]

log = logging.getLogger("nodeagent.kubelet.server")


async def cluster_ca(client: Any, data_dir: str) -> str | None:
    """The cluster CA (PEM) client certificates are checked against: the apiserver's published
    kube-root-ca.crt, else the local PKI of `nodeagent up`."""
    for _ in range(10):
        try:
            cm = await client.get("configmaps", "kube-root-ca.crt", "kube-system")
            pem = (cm.get("data") or {}).get("ca.crt")
            if pem:
                return pem
        except Exception as e:
            log.debug("kube-root-ca.crt not readable yet: %s", e)
        await asyncio.sleep(0.3)
    local = Path(data_dir, "pki", "ca.crt")
    try:
        return await asyncio.to_thread(local.read_text)
    except OSError:
        return None


async def start(deps: ServerDeps, client: Any, data_dir: str, cert_dir: str, host: str, port: int,
                node_ips: list[str]) -> KubeletServer:
    """Serving cert (CA-signed under `up`, else self-signed), client CA, token reviewer, listener."""
    pki = Path(data_dir, "pki")
    crt, key = await asyncio.to_thread(serving_cert, str(cert_dir), deps.node_name, list(node_ips),
                                       str(pki / "ca.crt"), str(pki / "ca.key"))
    ca_pem = await cluster_ca(client, data_dir)
    ctx = await asyncio.to_thread(server_context, crt, key, ca_pem)
    auth = Authenticator(deps.node_name, client.server, getattr(client, "_ssl", None), deps.clock)
    server = KubeletServer(deps, auth)
    await server.start(host, port, ctx)
    log.info("kubelet API serving on https://%s:%d (client certs %s)", host, server.port,
             "verified against the cluster CA" if ca_pem else "not accepted: no cluster CA known")
    return server
