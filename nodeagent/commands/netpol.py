"""`nodeagent netpol`: NetworkPolicy enforcement alone, from a cluster or from manifests.

    nodeagent netpol --kubeconfig admin.kubeconfig --mode nftables --node-name node1
    nodeagent netpol --from-file objects.yaml --netns node1 --once
    nodeagent netpol --mode iptables --cleanup
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging

log = logging.getLogger("nodeagent.netpol")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", default="iptables", choices=["iptables", "nftables"])
    p.add_argument("--kubeconfig", default=None,
                   help="take NetworkPolicies, Pods and Namespaces from this cluster")
    p.add_argument("--from-file", action="append", default=[],
                   help="YAML/JSON file of NetworkPolicies, Pods and Namespaces (repeatable; instead of "
                        "--kubeconfig)")
    p.add_argument("--node-name", default=None,
                   help="enforce for pods on this node (default: the hostname; with --from-file: every pod)")
    p.add_argument("--netns", default=None, help="program this named network namespace instead of the host's")
    p.add_argument("--sync-period", type=float, default=60.0, help="full resync period, seconds")
    p.add_argument("--min-sync-period", type=float, default=0.5, help="minimum gap between syncs, seconds")
    p.add_argument("--once", action="store_true", help="with --from-file: sync once and exit (rules stay)")
    p.add_argument("--cleanup", action="store_true",
                   help="remove every chain, set or table this mode owns and exit")


def load_objects(paths: list[str]) -> list[dict]:
    from nodeagent.api.manifests import read_objects

    return read_objects(paths, ("Pod", "Namespace", "NetworkPolicy"))


def feed(enforcer, objects: list[dict]) -> None:
    from nodeagent.client.informer import key_of

    for o in objects:
        if o["kind"] == "Namespace":
            labels = dict(o["metadata"].get("labels") or {})
            labels.setdefault("kubernetes.io/metadata.name", o["metadata"]["name"])
            enforcer.on_namespace(o["metadata"]["name"], labels)
    for o in objects:
        o.setdefault("metadata", {}).setdefault("namespace", "default")
        if o["kind"] == "Pod":
            enforcer.on_pod(key_of(o), o)
        elif o["kind"] == "NetworkPolicy":
            enforcer.on_policy(key_of(o), o)


def config_from_args(args: argparse.Namespace):
    """The enforcer's config: the default instance's chain, set and table names."""
    import socket

    from netpol.config import NetpolConfig
    from nodeagent.commands.configs import cli_errors
    from nodeagent.layout import Layout

    names = Layout.default()
    with cli_errors("netpol"):
        return NetpolConfig(chain_prefix=names.netpol_chain_prefix, set_prefix=names.netpol_set_prefix,
                            table=names.netpol_table, mode=args.mode,
                            node_name=args.node_name
                            or (None if args.from_file else socket.gethostname().lower()), netns=args.netns,
                            min_sync_period=args.min_sync_period, sync_period=args.sync_period)


def run(args: argparse.Namespace) -> int:

    from kernel.netns import NetnsWorker
    from netpol.enforcer import Enforcer
    from netpol.service import backend_for

    if args.from_file and args.kubeconfig:
        raise SystemExit("netpol: use --kubeconfig or --from-file, not both")
    cfg = config_from_args(args)
    worker = NetnsWorker(cfg.netns)
    enforcer = Enforcer(backend_for(cfg), worker, node_name=cfg.node_name, min_interval=cfg.min_sync_period,
                        max_interval=cfg.sync_period, sources=1 if args.from_file else 3)

    async def main() -> int:
        if args.cleanup:
            await enforcer.cleanup()
            left = await enforcer.leftovers()
            print(json.dumps({"mode": args.mode, "removed": True, "left": left}))
            return 1 if left else 0
        if args.from_file:
            feed(enforcer, load_objects(args.from_file))
            enforcer.source_synced()
            if args.once:
                await enforcer.sync(full=True)
                m = enforcer.model
                print(json.dumps({"mode": args.mode, "policies": len(m.policies), "pods": len(m.pods),
                                  "sets": len(m.set_kinds),
                                  "seconds": round(enforcer.stats.last_duration, 4)}))
                return 0
            return await until_signal(enforcer.run())
        if not args.kubeconfig:
            raise SystemExit("netpol: --kubeconfig or --from-file is required (or --cleanup)")
        from netpol import api_source
        from nodeagent.client.informer import SharedInformers
        from nodeagent.client.rest import Client

        client = Client.from_kubeconfig(args.kubeconfig)
        informers = SharedInformers(client, share=True)
        api_source.wire(informers, enforcer)
        async def serve() -> None:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(api_source.run(informers, enforcer))
                tg.create_task(enforcer.run())

        try:
            return await until_signal(serve())
        finally:
            await client.close()

    async def until_signal(work) -> int:
        """Run `work` until SIGINT/SIGTERM, then remove our rules: nothing stale outlives the enforcer."""
        import signal

        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(work)
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            log.info("netpol: stopping; removing %s rules", args.mode)
        finally:
            await enforcer.cleanup()
        return 0

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return 0
    finally:
        worker.close()
