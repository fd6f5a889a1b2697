"""`nodeagent doctor`: what this host supports and what will be used."""

from __future__ import annotations

import argparse
import json
import os


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")


def run(args: argparse.Namespace) -> int:
    from kernel.probe import format_report, probe_host

    report = probe_host()
    if args.output == "json":
        print(json.dumps(report.as_dict(), indent=2))
    else:
        if os.geteuid() != 0:
            print("note: not root; features that need root to probe are reported as not probed\n")
        print(format_report(report))
    return 0
