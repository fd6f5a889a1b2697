import asyncio

import pytest

from netproxy.hashing import port_proto_hash, sep_chain, svc_chain
from netproxy.model import Endpoint, ServicePortName, categorize, parse_endpoints, parse_service
from netproxy.runner import BoundedFrequencyRunner
from netproxy.tracker import EndpointsChangeTracker, ProxyState, ServiceChangeTracker
from nodeagent.testing.netproxy_lab import endpoint_slice, service

WEB = service("web", "10.96.0.10", [{"name": "http", "port": 80, "protocol": "TCP"}])
SPN = ServicePortName("default", "web", "http", "TCP")


def test_kube_proxy_hash_scheme():
    # chain names from real clusters
    assert port_proto_hash("default/kubernetes:https", "TCP") == "NPX46M4PTMTKRN6Y"
    assert svc_chain(ServicePortName("kube-system", "kube-dns", "dns", "UDP")) == "KUBE-SVC-TCOU7JCQXEZGVUNU"
    assert sep_chain(SPN, Endpoint("10.0.0.1", 8080)).startswith("KUBE-SEP-")
    assert sep_chain(SPN, Endpoint("10.0.0.1", 8080)) != sep_chain(SPN, Endpoint("10.0.0.2", 8080))
    assert len(sep_chain(SPN, Endpoint("10.0.0.1", 8080))) == 25


def test_parse_service_features():
    svc = service("lb", "10.96.0.5", [{"port": 53, "protocol": "UDP", "nodePort": 30053}],
                  type="LoadBalancer",
                  externalIPs=["1.2.3.4", "fe80::1"], sessionAffinity="ClientIP",
                  externalTrafficPolicy="Local", internalTrafficPolicy="Local")
    svc["status"] = {"loadBalancer": {"ingress": [{"ip": "5.6.7.8"}, {"hostname": "x"}]}}
    (sp,) = parse_service(svc).values()
    assert sp.name == ServicePortName("default", "lb", "", "UDP") and str(sp.name) == "default/lb"
    assert (sp.node_port, sp.external_ips, sp.load_balancer_ips) == (30053, ("1.2.3.4",), ("5.6.7.8",))
    assert sp.affinity_timeout == 10800 and sp.external_local and sp.internal_local
    headless = parse_service(service("h", "None", [{"port": 80}]))
    assert headless[ServicePortName("default", "h", "")].cluster_ip is None
    assert parse_service({"metadata": {"name": "x"}, "spec": {"type": "ExternalName"}}) == {}
    # nodePort only counts for NodePort/LoadBalancer types
    ports = parse_service(service("c", "10.96.0.6", [{"port": 1, "nodePort": 3}]))
    assert next(iter(ports.values())).node_port == 0


def test_parse_v1_endpoints():
    eps = parse_endpoints({"subsets": [{"addresses": [{"ip": "10.0.0.1", "nodeName": "n"}],
                                        "notReadyAddresses": [{"ip": "10.0.0.2"}],
                                        "ports": [{"name": "http", "port": 8080}]}]})
    assert eps == {("http", "TCP"): (Endpoint("10.0.0.1", 8080, True, True, False, "n"),
                                     Endpoint("10.0.0.2", 8080, False, False, False, None))}


def test_service_tracker_drops_noops_and_keeps_first_prev():
    t = ServiceChangeTracker()
    assert t.update(None, WEB)
    assert not t.update(WEB, None)  # add then delete before a sync: nothing to do
    assert t.pending() == 0
    t.update(None, WEB)
    state = ProxyState()
    ch = state.apply(t, EndpointsChangeTracker())
    assert ch.ports == {SPN} and state.services[SPN].port == 80
    changed = service("web", "10.96.0.10", [{"name": "http", "port": 81, "protocol": "TCP"}])
    t.update(WEB, changed)
    t.update(changed, WEB)  # back to what is applied
    assert t.pending() == 0
    t.update(WEB, changed)
    t.update(changed, service("web", "10.96.0.10", [{"name": "http", "port": 82, "protocol": "TCP"}]))
    ((_, (before, after)),) = t.take().items()
    assert before[SPN].port == 80 and after[SPN].port == 82


def test_endpoint_tracker_merges_slices_and_reports_stale_udp():
    udp = service("dns", "10.96.0.10", [{"name": "dns", "port": 53, "protocol": "UDP"}])
    spn = ServicePortName("default", "dns", "dns", "UDP")
    svcs, eps, state = ServiceChangeTracker(), EndpointsChangeTracker(), ProxyState()
    svcs.update(None, udp)
    p = [{"name": "dns", "port": 5353, "protocol": "UDP"}]
    eps.update_slice(endpoint_slice("dns", p, [{"ip": "10.0.0.1"}], name="s1"))
    eps.update_slice(endpoint_slice("dns", p, [{"ip": "10.0.0.2"}], name="s2"))
    ch = state.apply(svcs, eps)
    assert [e.ip for e in state.endpoints[spn]] == ["10.0.0.1", "10.0.0.2"]
    assert [sp.name for sp in ch.stale_services] == [spn]  # first endpoints: clear pre-DNAT flows
    assert not eps.update_slice(endpoint_slice("dns", p, [{"ip": "10.0.0.2"}], name="s2"))  # no-op
    eps.update_slice(endpoint_slice("dns", p, [], name="s1"), removed=True)
    ch = state.apply(svcs, eps)
    assert ch.ports == {spn}
    assert [(sp.name, e.ip) for sp, e in ch.stale_endpoints] == [(spn, "10.0.0.1")]


def test_categorize_local_policies_and_terminating_fallback():
    sp = next(iter(parse_service(service("w", "10.96.0.1", [{"port": 80, "nodePort": 30000}], type="NodePort",
                                         externalTrafficPolicy="Local")).values()))
    local, remote = Endpoint("10.0.0.1", 80, node_name="me"), Endpoint("10.0.0.2", 80, node_name="other")
    sel = categorize(sp, [local, remote], "me")
    assert sel.cluster == (local, remote) and sel.local == (local,)
    term = Endpoint("10.0.0.3", 80, ready=False, serving=True, terminating=True, node_name="me")
    dead = Endpoint("10.0.0.4", 80, ready=False, serving=False, node_name="me")
    sel = categorize(sp, [term, dead], "me")
    assert sel.cluster == (term,) and not sel.has_any_ready


def test_runner_rate_limits_and_retries():
    calls = []

    async def scenario():
        fail = {"n": 1}

        async def fn(periodic):
            calls.append((asyncio.get_running_loop().time(), periodic))
            if fail["n"]:
                fail["n"] -= 1
                raise RuntimeError("boom")

        r = BoundedFrequencyRunner(fn, min_interval=0.1, max_interval=0.4, retry_interval=0.05)
        task = asyncio.create_task(r.loop())
        r.run()
        await asyncio.sleep(0.02)
        for _ in range(5):
            r.run()  # a burst collapses
        await asyncio.sleep(0.75)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return r

    r = asyncio.run(scenario())
    times = [t for t, _ in calls]
    assert r.failures == 1
    assert all(b - a >= 0.099 for a, b in zip(times, times[1:], strict=False))  # never closer than min
    assert 3 <= len(calls) <= 5  # first (fails), retry, burst, periodic
    assert calls[-1][1] is True  # the idle tail is a periodic (full) resync
