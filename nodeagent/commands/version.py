"""`nodeagent version`."""

from __future__ import annotations

import argparse
import json
import platform

from nodeagent import __version__


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")


def run(args: argparse.Namespace) -> int:
    if args.output == "json":
        print(json.dumps({"version": __version__, "python": platform.python_version()}))
    else:
        print(f"nodeagent {__version__} (python {platform.python_version()})")
    return 0
