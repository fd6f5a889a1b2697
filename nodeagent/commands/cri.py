"""`nodeagent cri`: run the container runtime and its CRI runtime.v1 gRPC server in the foreground."""

from __future__ import annotations

import argparse

from nodeagent.layout import Layout

DEFAULTS = Layout.default()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--socket", default=DEFAULTS.cri_socket,
                   help="unix socket to serve on (default: %(default)s)")
    p.add_argument("--state-dir", default=DEFAULTS.cri_state_dir,
                   help="runtime state, images and container dirs (default: %(default)s)")
    p.add_argument("--cni-conf-dir", default=DEFAULTS.cni_conf_dir,
                   help="CNI network configs (default: %(default)s)")
    p.add_argument("--cni-bin-dir", action="append", default=None,
                   help="CNI plugin directory, repeatable (default: /opt/cni/bin and /usr/lib/cni)")
    p.add_argument("--registries", default=None, help="registries.yaml (k3s format) for mirrors and auth")
    p.add_argument("--cni-socket", default="",
                   help="the `nodeagent cni-daemon` socket our CNI plugins use (passed to them as "
                        f"NODEAGENT_CNI_SOCKET; default: theirs, {DEFAULTS.cni_socket})")


def config_from_args(args: argparse.Namespace):
    """The runtime's config; its images beside its state dir (where `nodeagent image` looks)."""
    from pathlib import Path

    from cri.config import DEFAULT_CNI_BIN_DIRS, CRIConfig
    from nodeagent.commands.configs import cli_errors

    with cli_errors("cri"):
        return CRIConfig(socket=args.socket, state_dir=args.state_dir,
                         image_dir=str(Path(args.state_dir).parent / "images"),
                         cni_conf_dir=args.cni_conf_dir,
                         cni_bin_dirs=tuple(args.cni_bin_dir or DEFAULT_CNI_BIN_DIRS),
                         registries=args.registries, cni_socket=args.cni_socket)


def run(args: argparse.Namespace) -> int:
    from cri.service import serve
    from nodeagent.commands.foreground import serve_until_signal

    cfg = config_from_args(args)
    return serve_until_signal(lambda ready: serve(cfg, ready))
