"""`nodeagent agent --server URL --token T --ca-cert-hash sha256:…`: join a node, then run the node part
(runtime, pod network, kubelet) as that node."""

from __future__ import annotations

import argparse
import asyncio
import sys


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
                   help="join without pinning the cluster CA (anyone answering at --server can impersonate it)")


def run(args: argparse.Namespace) -> int:
    import socket

    from nodeagent.api.bootstrap_token import is_token
    from nodeagent.commands.up import NODE_COMPONENTS, config_from_args, no_grpc_fork_handlers
    from nodeagent.host.memory import lean_process
    from nodeagent.kubelet.tls_bootstrap import JoinRefused, join
    from nodeagent.runner import run_components

    lean_process()
    no_grpc_fork_handlers()
    cfg = config_from_args(args)
    unsafe = args.discovery_token_unsafe_skip_ca_verification
    if is_token(args.token):
        node = (args.node_name or socket.gethostname()).lower()
        try:
            path = asyncio.run(join(args.server, args.token, args.ca_cert_hash, node, args.data_dir, unsafe))
        except JoinRefused as e:
            print(f"nodeagent agent: join refused: {e}", file=sys.stderr)
            return 1
        # the components use the node's own credential from here on (KubeletConfig.client()), never the token
        cfg.node_kubeconfig, cfg.token = str(path), None
    elif args.ca_cert_hash or not unsafe:
        print("nodeagent agent: --token is not a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16}, as in the server's "
              "join command); a plain bearer token is used only with --discovery-token-unsafe-skip-ca-verification "
              "and no --ca-cert-hash (the server's certificate is then not verified)", file=sys.stderr)
        return 2
    return asyncio.run(run_components(NODE_COMPONENTS, cfg))
