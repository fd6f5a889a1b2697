"""The speaker's Prometheus metrics, under MetalLB's names (so its dashboards and alerts apply), served on
`/metrics` of `--lb-metrics-port` (7472, MetalLB's, for the default data dir)."""

from __future__ import annotations

import logging

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, generate_latest

log = logging.getLogger("nodeagent.lbspeaker")


class SpeakerMetrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry(auto_describe=True)
        self.announced = Gauge("metallb_speaker_announced", "Services being announced from this node",
                               ["ip", "node", "protocol", "service"], registry=r)
        self.requests = Counter("metallb_layer2_requests_received", "Number of layer2 requests received for "
                                "owned IPs", ["ip"], registry=r)
        self.responses = Counter("metallb_layer2_responses_sent", "Number of layer2 responses sent for owned "
                                 "IPs", ["ip"], registry=r)
        self.gratuitous = Counter("metallb_layer2_gratuitous_sent", "Number of gratuitous layer2 packets "
                                  "sent for owned IPs as a result of failovers", ["ip"], registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)


async def serve_metrics(metrics: SpeakerMetrics, port: int) -> web.AppRunner:
    """`/metrics` on every address at `port`; the caller cleans the runner up."""
    async def handle(_request: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "0.0.0.0", port, reuse_address=True).start()
    except OSError:
        await runner.cleanup()
        raise
    log.info("lb speaker metrics on :%d/metrics", port)
    return runner
