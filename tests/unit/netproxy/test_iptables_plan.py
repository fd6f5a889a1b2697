from netproxy.hashing import sep_chain, svc_chain
from netproxy.iptables.plan import full_restore, partial_restore, plan_port
from netproxy.model import Endpoint, parse_service
from netproxy.proxier import NodeConfig
from nodeagent.testing.netproxy_lab import service

NODE = NodeConfig(node_name="me", cluster_cidr="10.244.0.0/16")


def port(**spec):
    ports = spec.pop("ports", [{"name": "http", "port": 80, "protocol": "TCP"}])
    return next(iter(parse_service(service("web", "10.96.0.10", ports, **spec)).values()))


EPS = [Endpoint(f"10.244.0.{i}", 8080, node_name="me" if i == 1 else "other") for i in (1, 2, 3)]


def test_cluster_ip_layout_matches_kube_proxy():
    sp = port()
    r = plan_port(sp, EPS, NODE)
    svc = svc_chain(sp.name)
    (dispatch,) = r.dispatch[("nat", "KUBE-SERVICES")]
    assert dispatch.endswith(f"-d 10.96.0.10/32 --dport 80 -j {svc}")
    rules = r.chains[svc]
    assert "! -s 10.244.0.0/16 -j KUBE-MARK-MASQ" in rules[0]
    assert "--probability 0.3333333333" in rules[1] and "--probability 0.5000000000" in rules[2]
    assert "statistic" not in rules[3]
    sep = sep_chain(sp.name, EPS[0])
    assert r.chains[sep] == ['-m comment --comment "default/web:http" -s 10.244.0.1/32 -j KUBE-MARK-MASQ',
                             '-m comment --comment "default/web:http" -m tcp -p tcp -j DNAT '
                             '--to-destination 10.244.0.1:8080']


def test_no_endpoints_rejects_in_filter_table():
    r = plan_port(port(), [], NODE)
    assert list(r.dispatch) == [("filter", "KUBE-SERVICES")]
    assert "REJECT" in r.dispatch[("filter", "KUBE-SERVICES")][0] and not r.chains
    headless = next(iter(parse_service(service("h", "None", [{"port": 80}])).values()))
    assert plan_port(headless, EPS, NODE).rule_count() == 0


def test_affinity_uses_recent():
    r = plan_port(port(sessionAffinity="ClientIP",
                       sessionAffinityConfig={"clientIP": {"timeoutSeconds": 30}}),
                  EPS, NODE)
    svc_rules = next(v for k, v in r.chains.items() if k.startswith("KUBE-SVC-"))
    assert sum("--rcheck --seconds 30 --reap" in x for x in svc_rules) == 3
    assert all("--set" in v[1] for k, v in r.chains.items() if k.startswith("KUBE-SEP-"))


def test_local_external_policy_uses_svl_with_local_endpoints_only():
    sp = port(type="NodePort", externalTrafficPolicy="Local",
              ports=[{"name": "http", "port": 80, "nodePort": 30080}])
    r = plan_port(sp, EPS, NODE)
    svl = next(k for k in r.chains if k.startswith("KUBE-SVL-"))
    assert [x.split()[-1] for x in r.chains[svl]] == [sep_chain(sp.name, EPS[0])]
    ext = next(k for k in r.chains if k.startswith("KUBE-EXT-"))
    assert r.chains[ext][-1] == f"-j {svl}"
    assert r.dispatch[("nat", "KUBE-NODEPORTS")][0].endswith(f"--dport 30080 -j {ext}")
    # no local endpoint: external traffic is dropped, not sent off-node
    r = plan_port(sp, EPS[1:], NODE)
    assert "has no local endpoints" in r.dispatch[("filter", "KUBE-EXTERNAL-SERVICES")][0]


def test_full_and_partial_restore():
    sp = port()
    old = {sp.name: plan_port(sp, EPS, NODE)}
    text = full_restore(old, NODE, stale_chains=["KUBE-SVC-GONE"])
    assert text.startswith("*filter\n") and text.count("COMMIT") == 2
    assert ":KUBE-SVC-GONE - [0:0]" in text and "-X KUBE-SVC-GONE" in text
    nat = text.split("*nat")[1]
    assert nat.index("-j KUBE-SVC-") < nat.index("-j KUBE-NODEPORTS")  # NodePorts jump stays last
    new = {sp.name: plan_port(sp, EPS[:2], NODE)}
    part = partial_restore(old, new, [sp.name])
    gone = sep_chain(sp.name, EPS[2])
    assert f"-X {gone}" in part and f":{gone} - [0:0]" in part
    assert sep_chain(sp.name, EPS[0]) not in part.split("-A KUBE-SVC")[0]  # unchanged SEP chains untouched
    assert "*filter" not in part  # nothing changed there
    assert partial_restore(new, new, [sp.name]) == ""
    # removal to zero endpoints: dispatch moves from nat to a filter REJECT
    part = partial_restore(new, {sp.name: plan_port(sp, [], NODE)}, [sp.name])
    assert "-D KUBE-SERVICES" in part and "-I KUBE-SERVICES 1" in part and "REJECT" in part


def test_large_cluster_mode_drops_per_endpoint_comments_only():
    from netproxy.iptables.plan import LARGE_CLUSTER_ENDPOINTS, large_cluster

    assert not large_cluster(LARGE_CLUSTER_ENDPOINTS) and large_cluster(LARGE_CLUSTER_ENDPOINTS + 1)
    sp = port(sessionAffinity="ClientIP", sessionAffinityConfig={"clientIP": {"timeoutSeconds": 30}})
    small, large = plan_port(sp, EPS, NODE), plan_port(sp, EPS, NODE, large=True)
    assert small.dispatch == large.dispatch  # KUBE-SERVICES keeps its comments, as kube-proxy's
    svc = svc_chain(sp.name)
    assert "cluster IP" in large.chains[svc][0]  # the masquerade rule keeps its comment too
    assert all("comment" not in x for x in large.chains[svc][1:])
    assert all("comment" in x for x in small.chains[svc])
    sep = sep_chain(sp.name, EPS[0])
    assert large.chains[sep] == ["-s 10.244.0.1/32 -j KUBE-MARK-MASQ",
                                 f"-m recent --name {sep} --mask 255.255.255.255 --rsource --set "
                                 "-m tcp -p tcp -j DNAT --to-destination 10.244.0.1:8080"]
    assert [x.replace(f'-m comment --comment "default/web:http -> {e}" ', "") for x, e in
            zip(small.chains[svc][1:4], EPS, strict=True)] == large.chains[svc][1:4]


def test_proxier_switches_to_large_mode_by_total_endpoints():
    from netproxy.iptables.proxier import IptablesProxier
    from netproxy.tracker import ProxyState

    state = ProxyState()
    sp = port()
    state.services[sp.name] = sp
    state.endpoints[sp.name] = tuple(Endpoint(f"10.244.{i // 250}.{i % 250 + 1}", 8080) for i in range(1000))
    assert not IptablesProxier._large(state)
    state.endpoints[sp.name] += (Endpoint("10.245.0.1", 8080),)
    assert IptablesProxier._large(state)
    state.endpoints.pop(sp.name)  # endpoints of ports without a Service do not count
    assert not IptablesProxier._large(state)


def test_hash16_is_base32_of_sha256_prefix():
    import base64
    import hashlib

    from netproxy.hashing import hash16

    for i in range(2000):
        data = f"ns{i}/svc{i}:http{'tcp' if i % 2 else 'udp'}10.0.{i % 250}.{i % 7}:{i}"
        assert hash16(data) == base64.b32encode(hashlib.sha256(data.encode()).digest()).decode()[:16]
