"""The L2 speaker's ARP responder on a real veth between two network namespaces: a neighbour's stale entry
moves to the owner's MAC on its gratuitous ARP, the neighbour's ARP requests are answered while the address
is owned and not after, and the metrics count what happened."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import pytest

from kernel import arp
from kernel.netns import netns_path, run_in
from nodeagent.lbspeaker.responder import Responder

pytestmark = [pytest.mark.root]

LB_IP = "192.0.2.100"
STRANGER = "02:00:00:00:00:99"


def ns(netns: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", netns, *argv], capture_output=True, text=True, check=check,
                          timeout=30)


def neighbour(netns: str, dev: str) -> str | None:
    out = ns(netns, "ip", "-j", "neigh", "show", LB_IP, "dev", dev).stdout
    return next((e.get("lladdr") for e in json.loads(out or "[]") if e.get("lladdr")), None)


async def _wait_for(what: str, fn, within: float = 10.0):
    end = time.monotonic() + within
    while time.monotonic() < end:
        got = await asyncio.to_thread(fn)
        if got:
            return got
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_gratuitous_arp_and_answers_only_while_owned(res) -> None:
    node, client = res.netns(), res.netns()
    a, b = res.veth(netns=node, peer_netns=client)
    ns(node, "ip", "addr", "add", "192.0.2.1/24", "dev", a)
    ns(client, "ip", "addr", "add", "192.0.2.2/24", "dev", b)
    for netns, dev in ((node, a), (client, b)):
        ns(netns, "ip", "link", "set", dev, "up")
    mac, sock = run_in(netns_path(node) or node, lambda: (arp.interface_mac(a), arp.open_socket(a)))
    # the client believes the address is elsewhere, as after a previous owner
    ns(client, "ip", "neigh", "replace", LB_IP, "lladdr", STRANGER, "dev", b, "nud", "stale")
    time.sleep(1.1)  # past the neighbour table's locktime, so the announcement may override the entry

    async def scenario() -> None:
        r = Responder(a, mac=mac)
        r.start(sock)
        try:
            r.own(LB_IP)
            await _wait_for("the gratuitous ARP to move the client's entry",
                            lambda: neighbour(client, b) == arp.mac_text(mac))
            ns(client, "ip", "neigh", "flush", "dev", b)
            # the client asks who has it, connecting (off the loop, which must stay free to answer)
            await asyncio.to_thread(ns, client, "curl", "-s", "-m", "1", f"http://{LB_IP}/", check=False)
            await _wait_for("the client to learn the owner's MAC by asking",
                            lambda: neighbour(client, b) == arp.mac_text(mac))
            text = r.metrics.render().decode()
            assert f'metallb_layer2_responses_sent_total{{ip="{LB_IP}"}}' in text
            assert f'metallb_layer2_gratuitous_sent_total{{ip="{LB_IP}"}}' in text
            assert r.answered >= 1
            r.disown(LB_IP)
            ns(client, "ip", "neigh", "flush", "dev", b)
            await asyncio.to_thread(ns, client, "curl", "-s", "-m", "1", f"http://{LB_IP}/", check=False)
            assert neighbour(client, b) is None  # nobody answers for it any more
        finally:
            r.close()

    asyncio.run(scenario())
