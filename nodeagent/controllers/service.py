"""The `controllers` component of `nodeagent server` / `up`: the controller manager under leader election."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
from pathlib import Path

from nodeagent.client.leader import LeaderElector
from nodeagent.client.rest import Client
from nodeagent.controllers.config import ControllerManagerConfig
from nodeagent.controllers.manager import run_controllers, select
from nodeagent.controllers.options import ControllerOptions

log = logging.getLogger("nodeagent.controllers")


async def serve(config: ControllerManagerConfig, ready: asyncio.Event) -> None:
    chosen = select(config.controllers)
    if not chosen:
        log.info("no controllers enabled")
        ready.set()
        return
    # the admin kubeconfig lives in the server's data dir, beside its pki/
    options = with_server_ca(config.options, Path(config.kubeconfig).parent)
    client = Client.from_kubeconfig(config.kubeconfig)
    try:
        # kube-controller-manager's Lease: the one its role may get and update
        elector = LeaderElector(client, "kube-controller-manager", f"{socket.gethostname()}-{id(client):x}")
        ready.set()
        await elector.run(lambda: run_controllers(
            client, controllers=chosen, options=options,
            use_service_account_credentials=config.use_service_account_credentials))
    finally:
        await client.close()


def with_server_ca(options: ControllerOptions, data_dir: Path) -> ControllerOptions:
    """csrsigning signs with the server's cluster CA (`<data dir>/pki`) unless the options name another;
    the token controller signs with its pki/sa.key and publishes its ca.crt, unless named too."""
    pki = data_dir / "pki"
    if not options.service_account_private_key_file:
        options = dataclasses.replace(options, service_account_private_key_file=str(pki / "sa.key"))
    if not options.root_ca_file:
        options = dataclasses.replace(options, root_ca_file=str(pki / "ca.crt"))
    if options.cluster_signing_cert_file or options.cluster_signing_key_file:
        return options
    return dataclasses.replace(options, cluster_signing_cert_file=str(pki / "ca.crt"),
                               cluster_signing_key_file=str(pki / "ca.key"))
