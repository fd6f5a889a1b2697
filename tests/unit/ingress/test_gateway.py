"""Gateway API to the desired model: our GatewayClass, listeners on the served ports, routes attached
by parentRef (sectionName, port, allowedRoutes, hostname intersection), weighted backendRefs, invalid
references answering 500, and the status conditions the spec asks for."""

from __future__ import annotations

from typing import Any

from nodeagent.ingress import gateway
from nodeagent.ingress.gateway import CONTROLLER_NAME, build, intersect
from nodeagent.ingress.model import WILDCARD_SUFFIX
from tests.unit.ingress.objects import endpoint_slice, service

GC = {"metadata": {"name": "nodeagent", "generation": 1}, "spec": {"controllerName": CONTROLLER_NAME}}
OTHER_GC = {"metadata": {"name": "other"}, "spec": {"controllerName": "example.com/other"}}


def gw(name: str = "gw", ns: str = "infra", listeners: list[dict[str, Any]] | None = None,
       cls: str = "nodeagent") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, "generation": 2},
            "spec": {"gatewayClassName": cls,
                     "listeners": listeners or [{"name": "http", "port": 80, "protocol": "HTTP"}]}}


def route(name: str, rules: list[dict[str, Any]], ns: str = "infra", hostnames: list[str] | None = None,
          parent: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"parentRefs": [parent or {"name": "gw"}], "rules": rules}
    if hostnames:
        spec["hostnames"] = hostnames
    return {"metadata": {"name": name, "namespace": ns, "generation": 3,
                         "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": spec}


def cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return ([service("a", [("", 80)], ns="infra"), service("b", [("", 80)], ns="infra")],
            [endpoint_slice("a", [("", 8080)], ["10.0.0.1"], ns="infra"),
             endpoint_slice("b", [("", 8080)], ["10.0.0.2"], ns="infra")])


def statuses(res: gateway.Result) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {(kind, *key): s for kind, key, s in res.statuses(["192.0.2.1"])}


def conds(obj_status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in obj_status["conditions"]}


def test_accepted_route_with_matches_and_weights() -> None:
    services, slices = cluster()
    r = route("r", [{"matches": [{"path": {"type": "Exact", "value": "/x"},
                                  "headers": [{"name": "Version", "value": "2"}], "method": "GET"}],
                     "backendRefs": [{"name": "a", "port": 80, "weight": 3}, {"name": "b", "port": 80}]}],
              hostnames=["*.example.com"])
    res = build([GC, OTHER_GC], [gw(), gw("theirs", cls="other")], [r], [], [], services, slices)
    [rt] = res.routes
    assert (rt.host, rt.host_kind, rt.path, rt.exact, rt.method) == ("*.example.com", WILDCARD_SUFFIX, "/x",
                                                                      True, "GET")
    assert [(h.name, h.value) for h in rt.headers] == [("version", "2")]
    weights = {e.ip: w for e, w in res.backends[rt.backend].servers}
    assert weights == {"10.0.0.1": 256, "10.0.0.2": 85}
    st = statuses(res)
    assert conds(st[("gatewayclasses", "", "nodeagent")]) == {"Accepted": ("True", "Accepted")}
    assert ("gatewayclasses", "", "other") not in st and ("gateways", "infra", "theirs") not in st
    g = st[("gateways", "infra", "gw")]
    assert conds(g) == {"Accepted": ("True", "Accepted"), "Programmed": ("True", "Programmed")}
    assert g["addresses"] == [{"type": "IPAddress", "value": "192.0.2.1"}]
    assert g["listeners"][0]["attachedRoutes"] == 1
    assert all(c["observedGeneration"] == 2 for c in g["conditions"] + g["listeners"][0]["conditions"])
    [parent] = st[("httproutes", "infra", "r")]["parents"]
    assert parent["controllerName"] == CONTROLLER_NAME and parent["parentRef"] == {"name": "gw"}
    assert conds(parent) == {"Accepted": ("True", "Accepted"), "ResolvedRefs": ("True", "ResolvedRefs")}
    assert all(c["observedGeneration"] == 3 for c in parent["conditions"])


def test_invalid_backend_refs_answer_500_for_their_share() -> None:
    services, slices = cluster()
    r = route("r", [{"backendRefs": [{"name": "a", "port": 80}, {"name": "gone", "port": 80}]},
                    {"matches": [{"path": {"value": "/k"}}], "backendRefs": [{"name": "a", "kind": "Pod"}]},
                    {"matches": [{"path": {"value": "/other-ns"}}],
                     "backendRefs": [{"name": "a", "namespace": "elsewhere", "port": 80}]}])
    res = build([GC], [gw()], [r], [], [], services, slices)
    by_path = {rt.path: rt for rt in res.routes}
    assert by_path["/"].error_share == 0.5 and by_path["/"].backend
    assert by_path["/k"].error_share == 1.0 and by_path["/other-ns"].error_share == 1.0
    [parent] = statuses(res)[("httproutes", "infra", "r")]["parents"]
    assert conds(parent)["ResolvedRefs"] == ("False", "BackendNotFound")
    assert {p.reason for p in res.problems} == {"BackendNotFound", "InvalidKind", "RefNotPermitted"}


def test_a_reference_grant_permits_a_cross_namespace_backend() -> None:
    services, slices = cluster()
    grant = {"metadata": {"name": "g", "namespace": "infra"},
             "spec": {"from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                "namespace": "apps"}],
                      "to": [{"group": "", "kind": "Service"}]}}
    listener = {"name": "http", "port": 80, "protocol": "HTTP",
                "allowedRoutes": {"namespaces": {"from": "All"}}}
    r = route("r", [{"backendRefs": [{"name": "a", "namespace": "infra", "port": 80}]}], ns="apps",
              parent={"name": "gw", "namespace": "infra"})
    res = build([GC], [gw(listeners=[listener])], [r], [grant], [], services, slices)
    assert res.routes[0].error_share == 0 and res.problems == []


def test_routes_the_listeners_do_not_admit() -> None:
    services, slices = cluster()
    listeners = [{"name": "http", "port": 80, "protocol": "HTTP", "hostname": "a.example.com"},
                 {"name": "odd", "port": 8080, "protocol": "HTTP"},
                 {"name": "tcp", "port": 80, "protocol": "TCP"}]
    rules = [{"backendRefs": [{"name": "a", "port": 80}]}]
    routes = [route("other-ns", rules, ns="apps", parent={"name": "gw", "namespace": "infra"}),
              route("no-host", rules, hostnames=["b.example.com"],
                    parent={"name": "gw", "sectionName": "http"}),
              route("no-section", rules, parent={"name": "gw", "sectionName": "nope"}),
              route("regex", [{"matches": [{"path": {"type": "RegularExpression", "value": "/.*"}}]}])]
    res = build([GC], [gw(listeners=listeners)], routes, [], [], services, slices)
    st = statuses(res)
    reasons = {name: conds(st[("httproutes", ns, name)]["parents"][0])["Accepted"][1]
               for ns, name in (("apps", "other-ns"), ("infra", "no-host"), ("infra", "no-section"),
                                ("infra", "regex"))}
    assert reasons == {"other-ns": "NotAllowedByListeners", "no-host": "NoMatchingListenerHostname",
                       "no-section": "NoMatchingParent", "regex": "UnsupportedValue"}
    assert res.routes == []
    ls = {ls["name"]: conds(ls) for ls in st[("gateways", "infra", "gw")]["listeners"]}
    assert ls["odd"]["Accepted"] == ("False", "PortUnavailable")
    assert ls["tcp"]["Accepted"] == ("False", "UnsupportedProtocol")
    assert ls["http"]["Programmed"] == ("True", "Programmed")


def test_hostname_intersection() -> None:
    assert intersect("", []) == [""]
    assert intersect("", ["a.com"]) == ["a.com"]
    assert intersect("*.example.com", []) == ["*.example.com"]
    assert intersect("*.example.com", ["foo.example.com", "example.com", "x.other.com"]) == [
        "foo.example.com"]
    assert intersect("foo.example.com", ["*.example.com"]) == ["foo.example.com"]
    assert intersect("*.example.com", ["*.foo.example.com"]) == ["*.foo.example.com"]
    assert intersect("*.foo.example.com", ["*.example.com"]) == ["*.foo.example.com"]


def test_transition_times_are_kept_while_a_condition_holds() -> None:
    old = {"conditions": [{"type": "Accepted", "status": "True", "lastTransitionTime": "then"}]}
    same = {"conditions": [{"type": "Accepted", "status": "True", "lastTransitionTime": "now"}]}
    flipped = {"conditions": [{"type": "Accepted", "status": "False", "lastTransitionTime": "now"}]}
    assert gateway.keep_transition_times(old, same)["conditions"][0]["lastTransitionTime"] == "then"
    assert gateway.keep_transition_times(old, flipped)["conditions"][0]["lastTransitionTime"] == "now"


def test_filters_give_a_rule_its_own_backend() -> None:
    services, slices = cluster()
    mod = {"type": "RequestHeaderModifier",
           "requestHeaderModifier": {"set": [{"name": "X-Set", "value": "1"}], "add": [{"name": "X-Add",
                                                                                       "value": "2"}],
                                     "remove": ["X-Gone"]}}
    redirect = {"type": "RequestRedirect", "requestRedirect": {"scheme": "https", "statusCode": 301}}
    r = route("r", [{"matches": [{"path": {"value": "/mod"}}], "filters": [mod],
                     "backendRefs": [{"name": "a", "port": 80}]},
                    {"matches": [{"path": {"value": "/plain"}}], "backendRefs": [{"name": "a", "port": 80}]},
                    {"matches": [{"path": {"value": "/away"}}], "filters": [redirect]}])
    mirror = route("m", [{"filters": [{"type": "RequestMirror"}],
                          "backendRefs": [{"name": "a", "port": 80}]}])
    res = build([GC], [gw()], [r, mirror], [], [], services, slices)
    by_path = {rt.path: res.backends[rt.backend] for rt in res.routes}
    assert [(o.op, o.name) for o in by_path["/mod"].header_ops] == [("set", "X-Set"), ("add", "X-Add"),
                                                                    ("remove", "X-Gone")]
    assert by_path["/plain"].header_ops == () and by_path["/plain"].name != by_path["/mod"].name
    assert by_path["/plain"].servers == by_path["/mod"].servers
    assert by_path["/away"].redirect is not None and by_path["/away"].redirect.code == 301
    assert by_path["/away"].servers == ()
    # RequestMirror is not served: the route is refused, not half-served
    assert {rt.origin for rt in res.routes} == {"HTTPRoute infra/r"}
    [parent] = statuses(res)[("httproutes", "infra", "m")]["parents"]
    assert conds(parent)["Accepted"] == ("False", "UnsupportedValue")
