"""`nodeagent cni-daemon`: the resident half of the CNI plugins' fast path."""

from __future__ import annotations

import argparse
import signal
import sys

from nodeagent.layout import Layout

DEFAULT_SOCKET = Layout.default().cni_socket


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--socket", default=DEFAULT_SOCKET,
                   help=f"unix socket the plugins connect to (default {DEFAULT_SOCKET}; "
                        "plugins read NODEAGENT_CNI_SOCKET)")


def run(args: argparse.Namespace) -> int:
    from cni import daemon

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        daemon.serve(args.socket)
    except KeyboardInterrupt:
        pass
    except RuntimeError as e:
        print(f"nodeagent cni-daemon: {e}", file=sys.stderr)
        return 1
    return 0
