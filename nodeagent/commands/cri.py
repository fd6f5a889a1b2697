"""`nodeagent cri`: run the container runtime and its CRI runtime.v1 gRPC server in the foreground."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--socket", default="/run/nodeagent/cri.sock", help="unix socket to serve on (default: %(default)s)")
    p.add_argument("--state-dir", default="/var/lib/nodeagent/cri",
                   help="runtime state, images and container dirs (default: %(default)s)")
    p.add_argument("--cni-conf-dir", default="/etc/cni/net.d", help="CNI network configs (default: %(default)s)")
    p.add_argument("--cni-bin-dir", action="append", default=None,
                   help="CNI plugin directory, repeatable (default: /opt/cni/bin and /usr/lib/cni)")
    p.add_argument("--registries", default=None, help="registries.yaml (k3s format) for mirrors and auth")
    p.add_argument("--cni-socket", default="",
                   help="the `nodeagent cni-daemon` socket our CNI plugins use (passed to them as "
                        "NODEAGENT_CNI_SOCKET; default: theirs, /run/nodeagent/cni.sock)")


def run(args: argparse.Namespace) -> int:
    import asyncio
    import signal

    from cri.daemon import CRIConfig, serve

    cfg = CRIConfig(socket=args.socket, state_dir=args.state_dir, cni_conf_dir=args.cni_conf_dir,
                    cni_bin_dirs=tuple(args.cni_bin_dir or CRIConfig.cni_bin_dirs), registries=args.registries,
                    cni_socket=args.cni_socket)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await serve(cfg, asyncio.Event())
        except asyncio.CancelledError:
            pass
        return 0

    return asyncio.run(main())
