"""Which kubeconfig of the person running `up`/`server` gets the cluster's context (`--write-kubeconfig`,
`--no-write-kubeconfig`): under sudo, the invoking user's `~/.kube/config`, owned by them."""

from __future__ import annotations

import argparse
import os
import pwd
from pathlib import Path

from nodeagent.apiserver.kubeconfig import UserKubeconfig
from nodeagent.layout import Layout


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--write-kubeconfig", metavar="PATH", default=None,
                   help="merge a context for this cluster into the kubeconfig at PATH (made 0600 if absent; "
                        "default: the invoking user's ~/.kube/config — SUDO_USER's under sudo — for the "
                        "default data dir, none for any other)")
    g.add_argument("--no-write-kubeconfig", action="store_true",
                   help="leave every kubeconfig but the data dir's admin.kubeconfig alone")


def invoking_user() -> tuple[Path, int | None, int | None]:
    """The home of the person behind this process, and their uid/gid when that is not us (sudo)."""
    name = os.environ.get("SUDO_USER")
    if name and name != "root":
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            pass
        else:
            return Path(pw.pw_dir), pw.pw_uid, pw.pw_gid
    return Path.home(), None, None


def target(args: argparse.Namespace, layout: Layout) -> UserKubeconfig | None:
    if args.no_write_kubeconfig:
        return None
    home, uid, gid = invoking_user()
    if args.write_kubeconfig:
        path = Path(args.write_kubeconfig).expanduser()
    elif layout.is_default:
        path = home / ".kube" / "config"
    else:
        return None  # a throwaway instance stays out of a person's kubeconfig unless asked
    return UserKubeconfig(path=str(path), context=layout.kube_context, uid=uid, gid=gid)
