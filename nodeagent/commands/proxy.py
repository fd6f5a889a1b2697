"""`nodeagent proxy`: netproxy alone, from Service / EndpointSlice manifests until the API client exists.

    nodeagent proxy --mode nftables --from-file services.yaml --netns node1 --once
    nodeagent proxy --mode iptables --netns node1 --cleanup
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging

log = logging.getLogger("nodeagent.proxy")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", default="iptables", choices=["iptables", "nftables", "ipvs"])
    p.add_argument("--from-file", action="append", default=[],
                   help="YAML/JSON file of Services and EndpointSlices (repeatable; multi-document "
                        "YAML, List kinds)")
    p.add_argument("--kubeconfig", default=None,
                   help="take Services and EndpointSlices from this cluster (instead of --from-file)")
    p.add_argument("--node-name", default=None)
    p.add_argument("--node-ip", action="append", default=[], help="address NodePorts answer on (repeatable)")
    p.add_argument("--cluster-cidr", default=None,
                   help="pod CIDR; off-cluster sources to ClusterIPs are masqueraded")
    p.add_argument("--netns", default=None, help="program this named network namespace instead of the host's")
    p.add_argument("--sync-period", type=float, default=30.0, help="full resync period, seconds")
    p.add_argument("--min-sync-period", type=float, default=1.0, help="minimum gap between syncs, seconds")
    p.add_argument("--rule-counters", action="store_true",
                   help="iptables mode: a packet counter on every rule, as iptables-nft writes them (off by "
                        "default: counters slow every change's kernel validation)")
    add_ipvs_arguments(p)
    p.add_argument("--once", action="store_true",
                   help="sync once and exit (the --from-file objects, and the cluster's with --kubeconfig)")
    p.add_argument("--cleanup", action="store_true", help="remove every rule this mode owns and exit")


def add_ipvs_arguments(p: argparse.ArgumentParser) -> None:
    """kube-proxy's ipvs flags, under kube-proxy's names (here and on `up`/`agent`)."""
    from netproxy.ipvs.plan import SCHEDULERS

    p.add_argument("--ipvs-scheduler", default="rr", choices=SCHEDULERS,
                   help="ipvs mode: the IPVS scheduler of every virtual server (default: %(default)s)")
    p.add_argument("--ipvs-strict-arp", action="store_true",
                   help="ipvs mode: set net.ipv4.conf.all.arp_ignore=1 and arp_announce=2, so the node stops "
                        "answering ARP for the Service IPs on kube-ipvs0 (needed by MetalLB / "
                        "kube-vip in L2 mode; on `up`/`agent`, on whenever --lb-announce is l2)")


def load_objects(paths: list[str]) -> tuple[list[dict], list[dict]]:
    from nodeagent.api.manifests import read_objects

    objs = read_objects(paths, ("Service", "EndpointSlice"))
    return [o for o in objs if o["kind"] == "Service"], [o for o in objs if o["kind"] == "EndpointSlice"]


def config_from_args(args: argparse.Namespace):
    from netproxy.config import ProxyConfig
    from nodeagent.commands.configs import cli_errors

    with cli_errors("proxy"):
        return ProxyConfig(mode=args.mode, node_name=args.node_name, node_ips=tuple(args.node_ip),
                           cluster_cidr=args.cluster_cidr, netns=args.netns,
                           min_sync_period=args.min_sync_period, sync_period=args.sync_period,
                           rule_counters=args.rule_counters, ipvs_scheduler=args.ipvs_scheduler,
                           ipvs_strict_arp=args.ipvs_strict_arp)


def run(args: argparse.Namespace) -> int:
    from kernel.netns import NetnsWorker
    from netproxy.service import Source, StaticSource, make_proxy

    cfg = config_from_args(args)
    worker = NetnsWorker(cfg.netns)
    proxy = make_proxy(cfg, worker)

    async def main() -> int:
        if args.cleanup:
            await proxy.cleanup()
            log.info("%s rules removed", args.mode)
            return 0
        services, slices = load_objects(args.from_file)
        if args.once and args.kubeconfig:  # one sync of the cluster's Services, not only the files'
            from nodeagent.client.rest import Client, ClientError

            once_client = Client.from_kubeconfig(args.kubeconfig)
            try:
                services += (await once_client.list("services"))["items"]
                slices += (await once_client.list("endpointslices"))["items"]
            except (ClientError, OSError, TimeoutError) as e:
                log.error("proxy --once: cannot list Services and EndpointSlices with %s: %s",
                          args.kubeconfig, e)
                return 1
            finally:
                await once_client.close()
        if args.once:
            for s in services:
                proxy.on_service(None, s)
            for s in slices:
                proxy.on_endpoint_slice(s)
            proxy.set_services_synced()
            proxy.set_endpoints_synced()
            result = await proxy.sync(full=True)
            print(json.dumps({"mode": args.mode, "services": len(services), "slices": len(slices),
                              "rules": result.rules if result else 0,
                              "chains": result.chains if result else 0,
                              "seconds": round(proxy.stats.last_duration, 4)}))
            return 0
        client = None
        source: Source
        if args.kubeconfig:
            from netproxy.api_source import ApiSource
            from nodeagent.client.rest import Client

            client = Client.from_kubeconfig(args.kubeconfig)
            source = ApiSource(client)
        else:
            source = StaticSource(services, slices)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(source.run(proxy))
                tg.create_task(proxy.run())
        finally:
            if client is not None:
                await client.close()
        return 0

    try:
        return asyncio.run(main())
    finally:
        worker.close()
