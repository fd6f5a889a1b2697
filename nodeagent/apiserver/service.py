"""The `apiserver` component of `nodeagent server` / `up`: `serve(config, ready)`."""

from __future__ import annotations

import asyncio

from nodeagent.apiserver.config import ApiServerConfig
from nodeagent.apiserver.server import ApiServer


async def serve(config: ApiServerConfig, ready: asyncio.Event) -> None:
    """Run until cancelled; `ready` is set once the API answers and the kubeconfig is written."""
    srv = ApiServer(config)
    try:
        await srv.start()
        ready.set()
        await asyncio.Event().wait()
    finally:
        await srv.stop()
