"""`nodeagent csi`: the hostpath CSI driver (Identity, Controller, Node) on a unix socket, registered with
the kubelet through its plugin-registration directory, in the foreground."""

from __future__ import annotations

import argparse
import socket

from nodeagent.layout import CSI_DRIVER, Layout

DEFAULTS = Layout.default()


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--endpoint", default=f"unix://{DEFAULTS.csi_socket}",
                   help="the driver's CSI endpoint, unix://PATH or PATH (default: %(default)s)")
    p.add_argument("--node-id", default=None, help="the node name (default: the hostname, as the kubelet)")
    p.add_argument("--state-dir", default=DEFAULTS.csi_state_dir,
                   help="volumes, snapshots and the driver's records (default: %(default)s)")
    p.add_argument("--plugin-registration-dir", default=DEFAULTS.plugin_registry_dir,
                   help="the kubelet's plugins_registry directory, where the registration socket goes, as "
                        "node-driver-registrar's (default: %(default)s; '' registers nowhere)")
    p.add_argument("--drivername", default=CSI_DRIVER, help="the driver's name (default: %(default)s)")
    p.add_argument("--max-volumes-per-node", type=int, default=0,
                   help="NodeGetInfo's volume limit, the CSINode allocatable count the scheduler honours "
                        "(default: 0, none)")
    p.add_argument("--capacity", default="",
                   help="storage the driver may hand out in all, a quantity such as 100Gi (default: the free "
                        "space of the state dir's filesystem)")


def config_from_args(args: argparse.Namespace):
    from csi.config import CSIConfig
    from csi.registrar import registration_socket
    from nodeagent.api.quantity import int_value

    endpoint = args.endpoint.removeprefix("unix://")
    if not endpoint.startswith("/"):
        raise SystemExit(f"nodeagent csi: --endpoint {args.endpoint!r}: a unix socket path is required")
    if args.max_volumes_per_node < 0:
        raise SystemExit("nodeagent csi: --max-volumes-per-node must not be negative")
    try:
        capacity = int_value(args.capacity) if args.capacity else 0
    except ValueError as e:
        raise SystemExit(f"nodeagent csi: --capacity {args.capacity!r}: {e}") from None
    return CSIConfig(node_id=(args.node_id or socket.gethostname()).lower(), state_dir=args.state_dir,
                     socket=endpoint, driver_name=args.drivername,
                     registration_socket=registration_socket(args.plugin_registration_dir, args.drivername)
                     if args.plugin_registration_dir else "",
                     max_volumes_per_node=args.max_volumes_per_node, capacity=capacity)


def run(args: argparse.Namespace) -> int:
    from csi.service import serve
    from nodeagent.commands.foreground import serve_until_signal

    cfg = config_from_args(args)
    return serve_until_signal(lambda ready: serve(cfg, ready))
