"""The `nodeagent` command: a thin dispatcher over one module per subcommand.

Subcommand modules are imported only when chosen, so `--help` and the CNI/CRI
hot paths never pay for the heavy libraries another subcommand needs.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import importlib
import signal
import sys

# name -> (module under nodeagent.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "version": ("version", "print the version"),
    "doctor": ("doctor", "report what this host's kernel supports and what nodeagent will use"),
    "up": ("up", "run the whole single-node cluster in the foreground"),
    "agent": ("agent", "run the node part (runtime, pod network, kubelet) against a remote apiserver"),
    "cni-daemon": ("cni_daemon", "serve the CNI plugins' fast path (netlink sockets kept open)"),
    "server": ("server", "run the control plane (apiserver, controllers) in the foreground"),
    "cri": ("cri", "run the container runtime (CRI runtime.v1 gRPC server) in the foreground"),
    "csi": ("csi", "run the hostpath CSI driver (Identity, Controller, Node), registered with the kubelet"),
    "image": ("image", "manage the runtime's images: import, pull, ls, rm, inspect, demo"),
    "proxy": ("proxy", "run netproxy alone: Services as iptables / nftables / IPVS rules"),
    "netpol": ("netpol", "run NetworkPolicy enforcement alone: iptables / nftables rules from policies"),
    "dns": ("dns", "run the cluster DNS server (Service and Pod records, forwarding) in the foreground"),
    "ingress": ("ingress", "run the Ingress / Gateway API controller and its HAProxy in the foreground"),
    "token": ("token", "bootstrap tokens for joining nodes: create (prints the join command), list, delete"),
    "lab": ("lab", "bring a cluster of network-namespace nodes on this machine up or down"),
    "kubectl": ("kubectl", "run kubectl against this node's cluster as admin (every argument is kubectl's)"),
    "reset": ("reset", "stop every pod of a node and remove what it made (--all: its data dir too)"),
    "status": ("status", "the node at a glance: components, pressure, pods with IPs and QoS, rule counts"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nodeagent",
        description="A kubelet-like node agent that runs real pods on the real kernel, "
        "with an embedded Kubernetes control plane.",
        epilog="A running nodeagent prints every thread's stack to stderr on SIGUSR1 (kill -USR1 PID), "
        "for a process that seems stuck.",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                        help="logging verbosity (default: info)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        mod = importlib.import_module(f"nodeagent.commands.{module}")
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["kubectl"]:  # kubectl's own flags, --help included, are not ours to parse
        from nodeagent.commands.kubectl import exec_kubectl

        return exec_kubectl(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    from nodeagent.logs import setup_logging

    setup_logging(args.log_level)
    # Works even when the event loop is blocked: the C handler walks every thread's frames.
    with contextlib.suppress(ValueError, OSError):  # stderr without a file descriptor (embedded, captured)
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
