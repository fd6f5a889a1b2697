"""`nodeagent up`: the whole single-node cluster in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging

from nodeagent.runner import Component, run_components

log = logging.getLogger("nodeagent.up")

# The parts of a single-node cluster, in start order; each issue fills its own in.
COMPONENTS = [
    Component("cri", "cri.daemon:serve", "the cri issue"),
    Component("apiserver", "nodeagent.apiserver.server:serve", "the apiserver issue"),
    Component("scheduler", "nodeagent.scheduler.service:serve", "the scheduler issue", after=("apiserver",)),
    Component("controllers", "nodeagent.controllers.manager:serve", "the controllers issue", after=("apiserver",)),
    Component("kubelet", "nodeagent.kubelet.agent:serve", "the kubelet issue"),
    Component("netproxy", "netproxy.service:serve", "the netproxy issue"),
]


@dataclasses.dataclass
class UpConfig:
    data_dir: str
    node_name: str | None
    container_runtime_endpoint: str | None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default="/var/lib/nodeagent", help="state directory (default: %(default)s)")
    p.add_argument("--node-name", default=None, help="node name (default: the hostname)")
    p.add_argument("--container-runtime-endpoint", default=None,
                   help="CRI endpoint, e.g. unix:///run/containerd/containerd.sock (default: start ours)")


def run(args: argparse.Namespace) -> int:
    from nodeagent.host.probe import probe_host

    report = probe_host()
    log.info("host: kernel %s, cgroups %s", report.kernel, report.cgroups.summary)
    cfg = UpConfig(args.data_dir, args.node_name, args.container_runtime_endpoint)
    return asyncio.run(run_components(COMPONENTS, cfg))
