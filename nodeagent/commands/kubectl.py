"""`nodeagent kubectl ARGS…`: the machine's kubectl, talking to this node's cluster as admin without
any setup (as `k3s kubectl`). The kubeconfig is `$KUBECONFIG` when set, else the admin kubeconfig of
the instance in `$NODEAGENT_DATA_DIR` (default /var/lib/nodeagent); a `--kubeconfig` in ARGS wins, as
kubectl itself decides. Every argument, `--help` included, is kubectl's."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from nodeagent.layout import DEFAULT_DATA_DIR, Layout


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("args", nargs=argparse.REMAINDER, help="kubectl's arguments")


def admin_kubeconfig(env: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    """The kubeconfig `nodeagent kubectl` hands kubectl, or None when the instance has none yet."""
    if env.get("KUBECONFIG"):
        return env["KUBECONFIG"]
    layout = Layout.for_data_dir(env.get("NODEAGENT_DATA_DIR") or DEFAULT_DATA_DIR)
    for path in (layout.admin_kubeconfig, layout.admin_kubeconfig_copy):
        if path and Path(path).is_file():
            return path
    return None


def run(args: argparse.Namespace) -> int:
    return exec_kubectl(list(args.args))


def exec_kubectl(argv: list[str]) -> int:
    """Replace this process with kubectl (its exit code, signals and terminal are kubectl's own)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("nodeagent kubectl: no kubectl on PATH (Debian: apt install kubernetes-client)",
              file=sys.stderr)
        return 1
    env = dict(os.environ)
    config = admin_kubeconfig(env)
    if config is None:
        where = env.get("NODEAGENT_DATA_DIR") or DEFAULT_DATA_DIR
        print(f"nodeagent kubectl: no admin kubeconfig for the data dir {where} yet: start the cluster with "
              "`nodeagent up` (or set NODEAGENT_DATA_DIR / KUBECONFIG)", file=sys.stderr)
        return 1
    env["KUBECONFIG"] = config
    os.execve(kubectl, [kubectl, *argv], env)
    return 0  # not reached: execve replaced this process
