"""`nodeagent doctor`: what this host supports and what will be used."""

from __future__ import annotations

import argparse
import json
import os


def add_arguments(p: argparse.ArgumentParser) -> None:
    from nodeagent.layout import DEFAULT_DATA_DIR

    p.add_argument("-o", "--output", choices=["text", "json"], default="text", help="output format")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help="the instance whose BGP sessions are shown, when it runs the bgp pod network "
                        "(default: %(default)s)")


def bgp_sessions(data_dir: str) -> dict | None:
    """The instance's BIRD and its BGP sessions (None when it runs no BIRD)."""
    import asyncio

    from nodeagent.layout import Layout
    from nodeagent.nodenet.bird import Bird, BirdDown

    bird = Bird(Layout.for_data_dir(data_dir).bird_dir)
    if not os.path.exists(bird.files.config):
        return None
    try:
        rows = asyncio.run(bird.protocols())
    except BirdDown as e:
        return {"socket": bird.files.socket, "error": f"BIRD does not answer: {e}", "sessions": []}
    return {"socket": bird.files.socket, "sessions": [
        {"name": r.name, "state": r.bgp_state or r.state, "since": r.since, "lastError": r.last_error}
        for r in rows if r.proto == "BGP"]}


def format_bgp(bgp: dict) -> str:
    lines = [f"bgp (BIRD at {bgp['socket']}):"]
    if bgp.get("error"):
        lines.append(f"  {bgp['error']} (the node agent restarts it; see its log)")
    for s in bgp["sessions"]:
        lines.append(f"  {s['name']:<28} {s['state']:<12} since {s['since']}"
                     + (f"  ({s['lastError']})" if s["lastError"] else ""))
    if not bgp["sessions"] and not bgp.get("error"):
        lines.append("  no BGP session (no other node, no BGPPeer)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from kernel.probe import format_report, probe_host

    report = probe_host()
    bgp = bgp_sessions(args.data_dir)
    if args.output == "json":
        print(json.dumps({**report.as_dict(), **({"bgp": bgp} if bgp else {})}, indent=2))
    else:
        if os.geteuid() != 0:
            print("note: not root; features that need root to probe are reported as not probed\n")
        print(format_report(report))
        if bgp:
            print(format_bgp(bgp))
    return 0
