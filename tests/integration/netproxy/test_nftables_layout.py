"""nftables mode: what `nft list` shows is the ruleset (nft reads it back unchanged), and common
one-Service changes are element-only batches (no rule, no chain: no whole-table validation)."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from kernel.netns import NetnsWorker
from netproxy.backends import make_proxier
from netproxy.proxier import NodeConfig
from netproxy.proxy import Proxy
from nodeagent.testing.netproxy_lab import endpoint_slice, service

pytestmark = [pytest.mark.root]
HTTP, EP = [{"name": "http", "port": 80}], [{"name": "http", "port": 8080}]


def _list(ns: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "table", "ip", "kube-proxy"],
                          capture_output=True, text=True, check=True).stdout


class _Proxy(Proxy):
    netns: str  # the scratch namespace the proxy programs


@pytest.fixture
def proxy(res, require):
    require("nftables")
    ns = res.netns()
    worker = NetnsWorker(ns)
    p = _Proxy(make_proxier("nftables", NodeConfig(node_name="n", cluster_cidr="10.244.0.0/16")), worker,
              clear_conntrack=False)
    p.set_services_synced()
    p.set_endpoints_synced()
    p.netns = ns
    try:
        yield p
    finally:
        asyncio.run(p.cleanup())
        worker.close()
        assert "kube-proxy" not in subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "tables"],
                                                  capture_output=True, text=True, check=True).stdout


def test_listing_reads_back_identically(proxy, res):
    proxy.on_service(None, service("web", "10.96.0.10", HTTP))
    proxy.on_endpoint_slice(endpoint_slice("web", EP, [{"ip": "10.244.0.5"}, {"ip": "10.244.0.6"}]))
    proxy.on_service(None, service("np", "10.96.0.11", [{**HTTP[0], "nodePort": 30090}], type="NodePort"))
    proxy.on_endpoint_slice(endpoint_slice("np", EP, [{"ip": "10.244.0.7"}]))
    proxy.on_service(None, service("sticky", "10.96.0.12", HTTP, sessionAffinity="ClientIP"))
    proxy.on_endpoint_slice(endpoint_slice("sticky", EP, [{"ip": "10.244.0.8"}]))
    proxy.on_service(None, service("empty", "10.96.0.13", HTTP))
    asyncio.run(proxy.sync())
    text = _list(proxy.netns)
    for expected in ("10.96.0.10 . tcp . 80 . 1 : 10.244.0.6 . 8080", "tcp . 30090 . 0 : 10.244.0.7 . 8080",
                     "dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 2 "
                     "map @service-endpoints",
                     "10.244.0.5 . 10.244.0.5", "update @affinity-", "10.96.0.13 . tcp . 80"):
        assert expected in text, expected
    other = res.netns()
    subprocess.run(["ip", "netns", "exec", other, "nft", "-f", "-"], input=text, text=True, check=True)
    assert _list(other) == text


def test_one_service_changes_are_element_only_batches(proxy):
    asyncio.run(proxy.sync())
    svc = service("web", "10.96.0.10", HTTP)
    proxy.on_service(None, svc)
    proxy.on_endpoint_slice(endpoint_slice("web", EP, [{"ip": "10.244.0.5"}]))
    added = asyncio.run(proxy.sync())
    proxy.on_endpoint_slice(endpoint_slice("web", EP, [{"ip": "10.244.0.5"}, {"ip": "10.244.0.9"}]))
    changed = asyncio.run(proxy.sync())
    proxy.on_service(svc, None)
    deleted = asyncio.run(proxy.sync())
    for r in (added, changed, deleted):
        assert not r.full and r.rules == 0 and r.chains == 0, r
    text = _list(proxy.netns)
    assert "10.96.0.10" not in text and "10.244.0.5" not in text  # its elements (and hairpin pair) are gone
