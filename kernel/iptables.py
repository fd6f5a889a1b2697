"""Which iptables backend this node uses: one rule, for every iptables user on the node.

Service rules (netproxy's iptables and ipvs modes), the CNI plugins' masquerade and hostPort rules,
nodenet's masquerade exemption and the NetworkPolicy chains all ask `backend()`, as iptables-wrapper
gives the kubelet and kube-proxy one mode. The rule:

1. `NODEAGENT_IPTABLES=legacy|nft` wins (in `env`, the variables a CNI plugin was called with, or
   in our own environment);
2. else the flavour of the host's `iptables` command (on PATH, else in /usr/sbin or /sbin), the
   admin's choice and what their `iptables-save` shows: its real name (xtables-legacy-multi,
   xtables-nft-multi) or, for a single-mode build, its `--version` ("(nf_tables)" or not:
   iptables before 1.8 is legacy only);
3. nft when there is no such command (iptables-wrapper's default);
4. but never nft on a kernel without nf_tables (asked over netlink, when we are root): legacy then.

This is also what iptables-wrapper decides in a kube-proxy container: it follows the mode the
kubelet's canary chains are in, and the kubelet writes them with the host's `iptables`. Which
backend already holds rules is a different question, answered for the doctor report by
`kernel.probe.iptables_rules_found`.
"""

from __future__ import annotations

import functools
import os

TYPE_CHECKING = False  # typing is not imported at run time: the CNI plugins' exec'd path stays lean
if TYPE_CHECKING:
    from collections.abc import Mapping

BACKENDS = ("legacy", "nft")
ENV = "NODEAGENT_IPTABLES"
SBIN = ("/usr/sbin/iptables", "/sbin/iptables")


def backend(env: Mapping[str, str] | None = None) -> str:
    """"legacy" or "nft": the node's one iptables backend (see the module's docstring)."""
    forced = (env or {}).get(ENV) or os.environ.get(ENV)
    if forced in BACKENDS:
        return forced
    return _host_backend()


@functools.cache
def _host_backend() -> str:
    flavour = command_flavour()
    if flavour == "nft" and os.geteuid() == 0 and not nf_tables_kernel():
        return "legacy"
    return flavour


def command_flavour() -> str:
    """The backend behind the host's `iptables` command; nft when there is none."""
    import shutil

    # iptables-wrapper's places too: a CNI plugin may be exec'd with a PATH that lacks the sbin dirs
    exe = shutil.which("iptables") or next((p for p in SBIN if os.access(p, os.X_OK)), None)
    if not exe:
        return "nft"
    real = os.path.basename(os.path.realpath(exe))
    if "legacy" in real:
        return "legacy"
    if "nft" in real:
        return "nft"
    import subprocess

    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return "nft"
    return "nft" if "nf_tables" in out else "legacy"


def nf_tables_kernel() -> bool:
    """Whether this kernel speaks nf_tables: a GETTABLE dump on a NETLINK_NETFILTER socket answers.

    In process (no nft CLI needed); the request autoloads nf_tables like any nft command would.
    Hand-encoded here rather than through kernel.nftables, whose import would cost the CNI
    plugins' exec'd path a few milliseconds."""
    import socket
    import struct

    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 12) as sock:  # NETLINK_NETFILTER
            sock.settimeout(2)
            sock.bind((0, 0))
            # NFT_MSG_GETTABLE (subsystem 10), NLM_F_REQUEST | NLM_F_DUMP, family NFPROTO_IPV4
            sock.send(struct.pack("=IHHIIBBH", 20, (10 << 8) | 1, 1 | 0x300, 1, 0, 2, 0, 0))
            buf = sock.recv(65536)
    except OSError:
        return False
    _length, mtype = struct.unpack_from("=IH", buf)
    if mtype == 2:  # NLMSG_ERROR
        (code,) = struct.unpack_from("=i", buf, 16)
        return code == 0
    return True
