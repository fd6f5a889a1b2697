"""LoadBalancer address allocation (MetalLB's controller rules), decided from Service objects alone."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.api import service_lb
from nodeagent.controllers import servicelb

POOL = service_lb.parse_pool("192.0.2.10-192.0.2.11")


def svc(name: str, ips: tuple[str, ...] = (), *, typ: str = "LoadBalancer", lb_ip: str = "",
        cls: str | None = None, share: str = "", ports: tuple[int, ...] = (80,), created: str = "",
        local: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": typ, "clusterIP": "10.96.0.5", "selector": {"app": name},
                            "ports": [{"port": p, "protocol": "TCP"} for p in ports]}
    if lb_ip:
        spec["loadBalancerIP"] = lb_ip
    if cls:
        spec["loadBalancerClass"] = cls
    if local:
        spec["externalTrafficPolicy"] = "Local"
    meta: dict[str, Any] = {"name": name, "namespace": "default", "creationTimestamp": created}
    if share:
        meta["annotations"] = {"metallb.universe.tf/allow-shared-ip": share}
    return {"metadata": meta, "spec": spec,
            "status": {"loadBalancer": {"ingress": [{"ip": i} for i in ips]} if ips else {}}}


def decide(s: dict[str, Any], *others: dict[str, Any], pool: service_lb.Pool = POOL) -> servicelb.Decision:
    return servicelb.decide(s, servicelb.usage([s, *others], pool), pool)


def test_pool_parsing_and_bad_ranges() -> None:
    assert list(service_lb.pool_addresses(service_lb.parse_pool("10.0.0.0/31, 10.0.0.5-10.0.0.6"))) == \
        ["10.0.0.0", "10.0.0.1", "10.0.0.5", "10.0.0.6"]
    assert service_lb.parse_pool("") == ()
    for bad in ("10.0.0.300/32", "10.0.0.9-10.0.0.1", "fd00::/120", "x"):
        with pytest.raises(ValueError, match="--service-lb-pool"):
            service_lb.parse_pool(bad)


def test_first_free_address_with_an_event_then_kept_silently() -> None:
    d = decide(svc("a"), svc("b", ("192.0.2.10",)))
    assert d.ips == ("192.0.2.11",)
    assert d.event == ("Normal", "IPAllocated", 'Assigned IP ["192.0.2.11"]')
    assert decide(svc("a", ("192.0.2.11",)), svc("b", ("192.0.2.10",))) == servicelb.Decision(("192.0.2.11",))


def test_exhausted_pool_leaves_it_pending_with_a_warning() -> None:
    d = decide(svc("c"), svc("a", ("192.0.2.10",)), svc("b", ("192.0.2.11",)))
    assert d.ips == ()
    assert d.event == ("Warning", "AllocationFailed",
                       'Failed to allocate IP for "default/c": no available IPs')


def test_no_pool_configured_says_so() -> None:
    d = decide(svc("a"), pool=())
    assert d.ips == () and d.event is not None and "no address pool is configured" in d.event[2]


def test_requested_address_honoured_outside_the_pool_refused() -> None:
    assert decide(svc("a", lb_ip="192.0.2.11")).ips == ("192.0.2.11",)
    d = decide(svc("a", ("192.0.2.10",), lb_ip="198.51.100.1"))
    assert d.ips == () and d.event == (
        "Warning", "AllocationFailed",
        'Failed to allocate IP for "default/a": ["198.51.100.1"] is not allowed in config')


def test_second_service_asking_for_a_held_address_is_refused() -> None:
    d = decide(svc("b", lb_ip="192.0.2.10"), svc("a", ("192.0.2.10",)))
    assert d.ips == ()
    assert d.event is not None and d.event[1] == "AllocationFailed"
    assert '"192.0.2.10" is in use by "default/a": existing service does not allow sharing' in d.event[2]


def test_sharing_under_one_key_on_other_ports_only() -> None:
    a = svc("a", ("192.0.2.10",), share="k", ports=(80,))
    assert decide(svc("b", lb_ip="192.0.2.10", share="k", ports=(443,)), a).ips == ("192.0.2.10",)
    # without asking for it, a shared address under the key is preferred over a free one
    assert decide(svc("b", share="k", ports=(443,)), a).ips == ("192.0.2.10",)
    d = decide(svc("b", lb_ip="192.0.2.10", share="k", ports=(80,)), a)
    assert d.ips == () and d.event is not None and "port TCP/80 is already in use" in d.event[2]
    d = decide(svc("b", lb_ip="192.0.2.10", share="other", ports=(443,)), a)
    assert d.event is not None and 'sharing key "other" does not match' in d.event[2]


def test_other_class_untouched_type_change_frees_the_address() -> None:
    assert decide(svc("a", cls="example.com/other")).ips is None
    assert decide(svc("a", ("192.0.2.10",), typ="ClusterIP")).ips == ()
    assert decide(svc("a", typ="ClusterIP")).ips is None
    assert decide(svc("a", cls=service_lb.LOAD_BALANCER_CLASS)).ips == ("192.0.2.10",)


def test_two_holders_by_hand_the_older_keeps_it() -> None:
    old = svc("a", ("192.0.2.10",), created="2026-01-01T00:00:00Z")
    new = svc("b", ("192.0.2.10",), created="2026-02-01T00:00:00Z")
    assert decide(old, new).ips == ("192.0.2.10",)
    assert decide(new, old).ips == ("192.0.2.11",)


def test_announced_lists_ours_with_addresses() -> None:
    got = service_lb.announced([svc("a", ("192.0.2.10",)), svc("b"), svc("c", ("192.0.2.11",), cls="x/y"),
                                svc("d", ("192.0.2.12",), typ="ClusterIP")])
    assert got == {"default/a": ("192.0.2.10",)}
