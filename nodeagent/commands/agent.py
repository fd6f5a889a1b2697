"""`nodeagent agent --server URL --token T --ca-cert-hash sha256:…`: join a node, then run the node part
(runtime, pod network, kubelet) as that node."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nodeagent.commands.configs import Configs


def add_arguments(p: argparse.ArgumentParser) -> None:
    from nodeagent.commands.up import add_node_arguments

    add_node_arguments(p)
    p.add_argument("--server", required=True, help="the apiserver's URL, e.g. https://10.0.0.1:6443")
    p.add_argument("--token", required=True,
                   help="the bootstrap token from the server's join command ([a-z0-9]{6}.[a-z0-9]{16}); with "
                        "--discovery-token-unsafe-skip-ca-verification also a plain bearer token")
    p.add_argument("--ca-cert-hash", action="append", default=[], metavar="sha256:HEX",
                   help="pin the cluster CA: sha256 of its public key, as the server prints it (repeatable)")
    p.add_argument("--discovery-token-unsafe-skip-ca-verification", action="store_true",
                   help="join without pinning the cluster CA (anyone answering at --server can "
                        "impersonate it)")
    p.add_argument("--snapshot-kubeconfig", default="",
                   help="the CSI snapshotter's own credential (external-snapshotter's sidecar runs under "
                        "its ServiceAccount): a kubeconfig of kube-system/snapshot-controller, or of a user "
                        "bound to ClusterRole snapshot-controller-runner; without it a node's credential may "
                        "not serve VolumeSnapshots, and the node's events say so")


def config_from_args(args: argparse.Namespace, node_kubeconfig: str | None = None) -> Configs:
    """Every node component's config for `agent` (parsed with `add_arguments`): with the node's own
    kubeconfig once it joined, else --server and --token (a plain bearer token)."""
    from nodeagent.client.config import Credentials
    from nodeagent.commands.configs import Configs, cli_errors, node_configs
    from nodeagent.layout import Layout

    layout = Layout.for_data_dir(args.data_dir)
    with cli_errors("agent"):
        credentials = Credentials(kubeconfig=node_kubeconfig) if node_kubeconfig else \
            Credentials(server=args.server, token=args.token or "")
        configs = node_configs(args, layout, credentials)
        if args.snapshot_kubeconfig:
            if not os.path.isfile(args.snapshot_kubeconfig):
                raise ValueError(f"--snapshot-kubeconfig {args.snapshot_kubeconfig}: no such file")
            configs["kubelet"] = dataclasses.replace(
                configs["kubelet"], snapshot_credentials=Credentials(kubeconfig=args.snapshot_kubeconfig))
        return Configs(layout=layout, **configs)


def run(args: argparse.Namespace) -> int:
    import socket

    from kernel.memory import lean_process
    from nodeagent.api.bootstrap_token import is_token
    from nodeagent.commands.up import NODE_COMPONENTS, no_grpc_fork_handlers
    from nodeagent.kubelet.tls_bootstrap import JoinRefused, join_in_child
    from nodeagent.runner import run_components

    lean_process()
    no_grpc_fork_handlers()
    cfg = config_from_args(args)  # every flag checked before the join creates or writes anything
    unsafe = args.discovery_token_unsafe_skip_ca_verification
    if is_token(args.token):
        node = (args.node_name or socket.gethostname()).lower()
        try:
            # in a child: the key and CSR need cryptography, which this long-running process never loads
            path = join_in_child(args.server, args.token, list(args.ca_cert_hash), node, args.data_dir,
                                 unsafe)
        except JoinRefused as e:
            print(f"nodeagent agent: join refused: {e}", file=sys.stderr)
            return 1
        # the components use the node's own credential from here on, never the token
        cfg = config_from_args(args, node_kubeconfig=str(path))
    elif args.ca_cert_hash or not unsafe:
        print("nodeagent agent: --token is not a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16}, as in "
              "the server's join command); a plain bearer token is used only with "
              "--discovery-token-unsafe-skip-ca-verification and no --ca-cert-hash (the server's certificate "
              "is then not verified)", file=sys.stderr)
        return 2
    return asyncio.run(run_components(cfg.components(NODE_COMPONENTS), cfg.by_component()))
