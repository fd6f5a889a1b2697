"""`nodeagent agent --server URL --token T`: the node part (runtime, pod network, kubelet) alone."""

from __future__ import annotations

import argparse
import asyncio


def add_arguments(p: argparse.ArgumentParser) -> None:
    from nodeagent.commands.up import add_node_arguments

    add_node_arguments(p)
    p.add_argument("--server", required=True, help="the apiserver's URL, e.g. https://10.0.0.1:6443")
    p.add_argument("--token", required=True, help="bearer token for the apiserver")


def run(args: argparse.Namespace) -> int:
    from nodeagent.commands.up import NODE_COMPONENTS, config_from_args, no_grpc_fork_handlers
    from nodeagent.runner import run_components

    no_grpc_fork_handlers()
    return asyncio.run(run_components(NODE_COMPONENTS, config_from_args(args)))
