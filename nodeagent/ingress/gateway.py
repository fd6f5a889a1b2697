"""Gateway API (gateway.networking.k8s.io/v1): GatewayClasses of our controller, their Gateways' HTTP and
HTTPS listeners and the HTTPRoutes attached to them, as routes and backends of the same desired model the
Ingresses make, and the status conditions the spec asks for. Pure: objects in, routes and statuses out.

The server installs no defaulting webhook and applies no CRD schema defaults, so the spec's defaults
(a parentRef's group and kind, a match's `PathPrefix /`, a backendRef's weight 1, a listener's
`allowedRoutes.namespaces.from: Same`) are applied here, where the objects are read.

Listeners are served by every node's proxy: HTTP on port 80 and HTTPS on 443 (each node's
`--ingress-http-port`/`--ingress-https-port`); any other port is refused (`PortUnavailable`), as is a
protocol other than HTTP/HTTPS. Requests that would go to an invalid backendRef answer 500 (their weight's
share of them), as the spec requires.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from nodeagent.api.times import now_rfc3339
from nodeagent.client.rest import Client, ClientError
from nodeagent.ingress.model import (
    ANY,
    EXACT,
    WILDCARD_SUFFIX,
    Backend,
    Certificate,
    Endpoints,
    HeaderMatch,
    HeaderOp,
    Problem,
    Redirect,
    Route,
    ServiceRef,
    backend_for,
    host_kind,
    host_matches,
    tls_pem,
)

GROUP = "gateway.networking.k8s.io"
VERSION = "v1"
CONTROLLER_NAME = "nodeagent.io/gateway-controller"
CLASS_NAME = "nodeagent"
RESOURCES = {"gatewayclasses": f"{GROUP}/{VERSION}/gatewayclasses", "gateways": f"{GROUP}/{VERSION}/gateways",
             "httproutes": f"{GROUP}/{VERSION}/httproutes",
             "referencegrants": f"{GROUP}/v1beta1/referencegrants", "namespaces": "namespaces"}
PORTS = {"HTTP": 80, "HTTPS": 443}  # the listener port each protocol is served on
ROUTE_KIND = {"group": GROUP, "kind": "HTTPRoute"}
SAFE_HEADER = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")

Obj = dict[str, Any]
StatusKey = tuple[str, str]  # (namespace, name)
StatusFn = Callable[[Sequence[str]], dict[str, Any]]


@dataclasses.dataclass
class Result:
    routes: list[Route] = dataclasses.field(default_factory=list)
    backends: dict[str, Backend] = dataclasses.field(default_factory=dict)
    certificates: list[Certificate] = dataclasses.field(default_factory=list)
    problems: list[Problem] = dataclasses.field(default_factory=list)
    _statuses: list[tuple[str, StatusKey, StatusFn]] = dataclasses.field(default_factory=list)

    def statuses(self, addresses: Sequence[str]) -> Iterable[tuple[str, StatusKey, dict[str, Any]]]:
        """(informer kind, key, desired status) for every object whose status we own."""
        for kind, key, fn in self._statuses:
            yield kind, key, fn(addresses)


def condition(type_: str, ok: bool, reason: str, message: str, generation: int | None) -> dict[str, Any]:
    c: dict[str, Any] = {"type": type_, "status": "True" if ok else "False", "reason": reason,
                         "message": message, "lastTransitionTime": now_rfc3339()}
    if generation is not None:
        c["observedGeneration"] = generation
    return c


def keep_transition_times(old: Any, new: Any) -> Any:
    """`new` with each condition's lastTransitionTime taken from `old` where its status did not change."""
    if isinstance(new, dict):
        prev = old if isinstance(old, dict) else {}
        return {k: keep_transition_times(prev.get(k), v) for k, v in new.items()}
    if isinstance(new, list):
        olds = old if isinstance(old, list) else []
        if new and all(isinstance(c, dict) and "type" in c and "status" in c for c in new):
            prev = {c.get("type"): c for c in olds if isinstance(c, dict)}
            return [{**c, "lastTransitionTime": prev[c["type"]]["lastTransitionTime"]}
                    if c["type"] in prev and prev[c["type"]].get("status") == c["status"]
                    and prev[c["type"]].get("lastTransitionTime") else c for c in new]
        return [keep_transition_times(olds[i] if i < len(olds) else None, v) for i, v in enumerate(new)]
    return new


def _gen(o: Obj) -> int | None:
    g = (o.get("metadata") or {}).get("generation")
    return int(g) if g is not None else None


def _meta(o: Obj) -> tuple[str, str]:
    m = o.get("metadata") or {}
    return m.get("namespace", ""), m["name"]


@dataclasses.dataclass
class _Listener:
    gateway: Obj
    spec: Obj
    ok: bool  # accepted and programmed
    attached: int = 0

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def hostname(self) -> str:
        return str(self.spec.get("hostname") or "").lower()


def _allowed(listener: _Listener, route_ns: str, namespaces: Mapping[str, Obj]) -> bool:
    from nodeagent.api.selectors import SelectorError, from_label_selector

    ns_policy = ((listener.spec.get("allowedRoutes") or {}).get("namespaces") or {})
    how = ns_policy.get("from") or "Same"
    if how == "All":
        return True
    if how == "Same":
        return route_ns == _meta(listener.gateway)[0]
    if how == "Selector":
        labels = ((namespaces.get(route_ns) or {}).get("metadata") or {}).get("labels") or {}
        try:
            return from_label_selector(ns_policy.get("selector")).matches(labels)
        except SelectorError:
            return False
    return False


def _kinds_ok(listener: Obj) -> tuple[list[dict[str, str]], bool]:
    """The route kinds a listener supports, and whether every kind it asked for is one."""
    asked = (listener.get("allowedRoutes") or {}).get("kinds")
    if not asked:
        return [dict(ROUTE_KIND)], True
    good = [k for k in asked if (k.get("group") or GROUP) == GROUP and k.get("kind") == "HTTPRoute"]
    return ([dict(ROUTE_KIND)] if good else []), len(good) == len(asked)


def intersect(listener_host: str, route_hosts: Sequence[str]) -> list[str]:
    """The hostnames a route serves through a listener (the spec's intersection rules)."""
    if not listener_host:
        return list(route_hosts) or [""]
    if not route_hosts:
        return [listener_host]
    out = []
    lkind = host_kind(listener_host, suffix_wildcards=True)
    for h in route_hosts:
        rkind = host_kind(h, suffix_wildcards=True)
        if h == listener_host:
            out.append(h)
        elif rkind == EXACT and lkind == WILDCARD_SUFFIX and host_matches(listener_host, lkind, h):
            out.append(h)
        elif lkind == EXACT and rkind == WILDCARD_SUFFIX and host_matches(h, rkind, listener_host):
            out.append(listener_host)
        elif lkind == rkind == WILDCARD_SUFFIX:  # the narrower of two wildcards
            if h[1:].endswith(listener_host[1:]):
                out.append(h)
            elif listener_host[1:].endswith(h[1:]):
                out.append(listener_host)
    return out


def _granted(grants: Iterable[Obj], from_kind: str, from_ns: str, to_kind: str, to_ns: str, to_name: str,
             to_group: str = "") -> bool:
    """A ReferenceGrant in `to_ns` lets `from_kind` objects of `from_ns` refer to this target."""
    for g in grants:
        if _meta(g)[0] != to_ns:
            continue
        spec = g.get("spec") or {}
        if not any(f.get("group") == GROUP and f.get("kind") == from_kind and f.get("namespace") == from_ns
                   for f in spec.get("from") or []):
            continue
        if any((t.get("group") or "") == to_group and t.get("kind") == to_kind
               and (not t.get("name") or t.get("name") == to_name) for t in spec.get("to") or []):
            return True
    return False


def build(classes: Iterable[Obj], gateways: Iterable[Obj], routes: Iterable[Obj], grants: Iterable[Obj],
          namespaces: Iterable[Obj], services: Iterable[Obj], slices: Iterable[Obj],
          secrets: Iterable[Obj] = ()) -> Result:
    out = Result()
    grants = list(grants)
    ns_by = {_meta(n)[1]: n for n in namespaces}
    endpoints = Endpoints(services, slices)
    secret_by = {_meta(s): s for s in secrets}

    our_classes = set()
    for gc in classes:
        if (gc.get("spec") or {}).get("controllerName") != CONTROLLER_NAME:
            continue
        name = _meta(gc)[1]
        our_classes.add(name)
        out._statuses.append(("gatewayclasses", ("", name), _class_status(_gen(gc))))

    ours: dict[StatusKey, tuple[Obj, list[_Listener]]] = {}
    for gw in sorted(gateways, key=_meta):
        if (gw.get("spec") or {}).get("gatewayClassName") in our_classes:
            ours[_meta(gw)] = gw, _gateway(gw, out, secret_by, grants)
    listeners = {key: ls for key, (_, ls) in ours.items()}
    for route in sorted(routes, key=lambda r: ((r.get("metadata") or {}).get("creationTimestamp") or "",
                                               _meta(r))):
        _route(route, listeners, ns_by, endpoints, grants, out)
    for key, (gw, ls) in ours.items():
        out._statuses.append(("gateways", key, _gateway_status(gw, ls)))
    return out


def _class_status(gen: int | None) -> StatusFn:
    return lambda _addresses: {"conditions": [
        condition("Accepted", True, "Accepted", "served by nodeagent's HAProxy", gen)]}


def _gateway(gw: Obj, out: Result, secrets: Mapping[StatusKey, Obj], grants: list[Obj]) -> list[_Listener]:
    ns = _meta(gw)[0]
    made = []
    for spec in (gw.get("spec") or {}).get("listeners") or []:
        protocol = spec.get("protocol")
        ok = protocol in PORTS and spec.get("port") == PORTS[protocol]
        lst = _Listener(gw, spec, ok)
        if ok and protocol == "HTTPS":
            tls = spec.get("tls") or {}
            refs = tls.get("certificateRefs") or []
            if (tls.get("mode") or "Terminate") != "Terminate" or not refs:
                lst.ok = False
            for ref in refs[:1]:
                ref_ns = ref.get("namespace") or ns
                if (ref.get("group") or "") != "" or (ref.get("kind") or "Secret") != "Secret" or \
                        (ref_ns != ns and not _granted(grants, "Gateway", ns, "Secret", ref_ns, ref["name"])):
                    lst.ok = False
                    continue
                pem, why = tls_pem(secrets.get((ref_ns, ref.get("name", ""))), ref_ns, ref.get("name", ""))
                if why:
                    lst.ok = False
                    continue
                host = lst.hostname
                out.certificates.append(Certificate(f"gw_{ns}_{_meta(gw)[1]}_{lst.name}", pem,
                                                    (host,) if host else ()))
        made.append(lst)
    return made


def _gateway_status(gw: Obj, ls: list[_Listener]) -> StatusFn:
    gen = _gen(gw)
    wants_addresses = bool((gw.get("spec") or {}).get("addresses"))
    listener_status = []
    for lst in ls:
        supported, kinds_ok = _kinds_ok(lst.spec)
        protocol, port = lst.spec.get("protocol"), lst.spec.get("port")
        conds = []
        if protocol not in PORTS:
            conds.append(condition("Accepted", False, "UnsupportedProtocol",
                                   f"protocol {protocol} is not served (HTTP and HTTPS are)", gen))
        elif port != PORTS[protocol]:
            conds.append(condition("Accepted", False, "PortUnavailable",
                                   f"{protocol} is served on port {PORTS[protocol]} only", gen))
        else:
            conds.append(condition("Accepted", True, "Accepted", "listener accepted", gen))
        refs_ok = kinds_ok and (protocol != "HTTPS" or lst.ok or port != PORTS.get(protocol))
        conds.append(condition("ResolvedRefs", refs_ok, "ResolvedRefs" if refs_ok else
                               ("InvalidRouteKinds" if not kinds_ok else "InvalidCertificateRef"),
                               "references resolved" if refs_ok else "a reference cannot be resolved", gen))
        conds.append(condition("Programmed", lst.ok, "Programmed" if lst.ok else "Invalid",
                               "served by every node's proxy" if lst.ok else "not served", gen))
        conds.append(condition("Conflicted", False, "NoConflicts", "no conflicts", gen))
        listener_status.append((lst, supported, conds))
    any_ok = any(lst.ok for lst in ls)

    def status(addresses: Sequence[str]) -> dict[str, Any]:
        return {
            "addresses": [{"type": "IPAddress", "value": a} for a in addresses] or None,
            "conditions": [
                condition("Accepted", not wants_addresses, "Accepted" if not wants_addresses else
                          "UnsupportedAddress", "gateway accepted" if not wants_addresses else
                          "spec.addresses cannot be honoured: the Gateway is served on the nodes' addresses",
                          gen),
                condition("Programmed", any_ok and bool(addresses), "Programmed" if any_ok and addresses
                          else ("AddressNotAssigned" if not addresses else "Invalid"),
                          "served by every node's proxy" if any_ok else "no listener can be served", gen)],
            "listeners": [{"name": lst.name, "supportedKinds": supported, "attachedRoutes": lst.attached,
                           "conditions": conds} for lst, supported, conds in listener_status],
        }

    return status


def _parent_key(ref: Obj, route_ns: str) -> StatusKey | None:
    if (ref.get("group") or GROUP) != GROUP or (ref.get("kind") or "Gateway") != "Gateway":
        return None
    return ref.get("namespace") or route_ns, ref.get("name", "")


def _route(route: Obj, gateways: Mapping[StatusKey, list[_Listener]], namespaces: Mapping[str, Obj],
           endpoints: Endpoints, grants: list[Obj], out: Result) -> None:
    ns, name = _meta(route)
    spec = route.get("spec") or {}
    gen = _gen(route)
    hostnames = [h.lower() for h in spec.get("hostnames") or []]
    rules, refs_cond, unsupported = _rules(route, endpoints, grants, out)
    parents = []
    for ref in spec.get("parentRefs") or []:
        key = _parent_key(ref, ns)
        if key is None or key not in gateways:
            continue  # not ours to report on
        section, port = ref.get("sectionName"), ref.get("port")
        candidates = [lst for lst in gateways[key] if (not section or lst.name == section)
                      and (port is None or lst.spec.get("port") == port)]
        if not candidates:
            accepted = condition("Accepted", False, "NoMatchingParent",
                                 "no listener matches the parentRef's sectionName and port", gen)
        else:
            allowed = [lst for lst in candidates if _allowed(lst, ns, namespaces) and _kinds_ok(lst.spec)[0]]
            served = [(lst, intersect(lst.hostname, hostnames)) for lst in allowed]
            served = [(lst, hs) for lst, hs in served if hs]
            if not allowed:
                accepted = condition("Accepted", False, "NotAllowedByListeners",
                                     "the listeners' allowedRoutes do not admit this route", gen)
            elif not served:
                accepted = condition("Accepted", False, "NoMatchingListenerHostname",
                                     "no hostname of the route matches a listener's", gen)
            elif unsupported:
                accepted = condition("Accepted", False, "UnsupportedValue", unsupported, gen)
            else:
                accepted = condition("Accepted", True, "Accepted", "route accepted", gen)
                for lst, hosts in served:
                    lst.attached += 1
                    if lst.ok:
                        _emit(rules, hosts, lst, ns, name, out)
        parents.append({"parentRef": ref, "controllerName": CONTROLLER_NAME,
                        "conditions": [accepted, {**refs_cond, "observedGeneration": gen}
                                       if gen is not None else refs_cond]})
    if not parents:
        return
    others = [p for p in ((route.get("status") or {}).get("parents") or [])
              if p.get("controllerName") != CONTROLLER_NAME]
    out._statuses.append(("httproutes", (ns, name), lambda _a: {"parents": others + parents}))


@dataclasses.dataclass(frozen=True)
class _Rule:
    matches: tuple[tuple[str, bool, tuple[HeaderMatch, ...], str, tuple[HeaderMatch, ...]], ...]
    backend: str | None  # None: every request answers 500
    error_share: float


def _rules(route: Obj, endpoints: Endpoints, grants: list[Obj],
           out: Result) -> tuple[list[_Rule], dict[str, Any], str]:
    """The route's rules as matches → backend, its ResolvedRefs condition, and why it cannot be served
    ("" when it can)."""
    ns, name = _meta(route)
    refs_problem: tuple[str, str] | None = None
    unsupported = ""
    rules = []
    for rule in (route.get("spec") or {}).get("rules") or []:
        header_ops, redirect, why_not = filters(rule.get("filters") or [])
        if why_not:
            unsupported = why_not
        matches = []
        for m in rule.get("matches") or [{}]:
            path = m.get("path") or {}
            ptype, pvalue = path.get("type") or "PathPrefix", path.get("value") or "/"
            if ptype not in ("PathPrefix", "Exact"):
                unsupported = f"path match type {ptype} is not supported"
            headers = []
            for h in m.get("headers") or []:
                if not set(h.get("name", "")) <= SAFE_HEADER:
                    unsupported = f"header name {h.get('name')!r} is not supported"
                    continue
                headers.append(HeaderMatch(h["name"].lower(), str(h.get("value", "")),
                                           (h.get("type") or "Exact") == "RegularExpression"))
            queries = []
            for q in m.get("queryParams") or []:
                if not set(q.get("name", "")) <= SAFE_HEADER:
                    unsupported = f"query parameter name {q.get('name')!r} is not supported"
                    continue
                queries.append(HeaderMatch(q["name"], str(q.get("value", "")),
                                           (q.get("type") or "Exact") == "RegularExpression"))
            method = str(m.get("method") or "")
            matches.append((pvalue, ptype == "Exact", tuple(headers), method, tuple(queries)))
        good: list[ServiceRef] = []
        bad_weight = 0
        for ref in rule.get("backendRefs") or []:
            weight = int(ref.get("weight", 1))
            ref_ns = ref.get("namespace") or ns
            why: tuple[str, str] | None = None
            if (ref.get("group") or "") != "" or (ref.get("kind") or "Service") != "Service":
                why = ("InvalidKind", f"backendRef kind {ref.get('kind')} is not supported (Service is)")
            elif ref_ns != ns and not _granted(grants, "HTTPRoute", ns, "Service", ref_ns,
                                               ref.get("name", "")):
                why = ("RefNotPermitted", f"no ReferenceGrant in {ref_ns} allows a reference to "
                                          f"Service {ref.get('name')}")
            elif ref.get("port") is None:
                why = ("UnsupportedValue", f"backendRef {ref.get('name')} has no port")
            else:
                sref = ServiceRef(ref_ns, ref["name"], int(ref["port"]), weight)
                _, missing = endpoints.resolve(sref)
                if missing:
                    why = ("BackendNotFound", missing)
                else:
                    good.append(sref)
            if why:
                refs_problem = refs_problem or why
                bad_weight += weight
                out.problems.append(Problem("HTTPRoute", ns, name, why[0], why[1]))
        total = bad_weight + sum(r.weight for r in good)
        backend = None
        if redirect is not None:  # answered by the proxy: no backend is asked
            be = Backend("be_redirect_" + _digest(redirect), (), "redirect", redirect=redirect)
            out.backends.setdefault(be.name, be)
            rules.append(_Rule(tuple(matches), be.name, 0.0))
            continue
        if good and any(r.weight for r in good):
            be, _ = backend_for(good, endpoints)
            if header_ops:  # its own backend: the changes apply to this rule's requests only
                be = dataclasses.replace(be, name=f"{be.name}_{_digest(header_ops)}", header_ops=header_ops)
            out.backends.setdefault(be.name, be)
            backend = be.name
        rules.append(_Rule(tuple(matches), backend, bad_weight / total if total else 1.0))
    reason, message = refs_problem or ("ResolvedRefs", "references resolved")
    refs = condition("ResolvedRefs", refs_problem is None, reason, message, None)
    return rules, refs, unsupported


def _digest(what: object) -> str:
    import hashlib

    return hashlib.sha256(repr(what).encode()).hexdigest()[:8]


def filters(specs: Sequence[Obj]) -> tuple[tuple[HeaderOp, ...], Redirect | None, str]:
    """A rule's filters as header changes and a redirect, or why they cannot be served ("" when they can):
    RequestHeaderModifier and RequestRedirect (core), ResponseHeaderModifier (extended)."""
    ops: list[HeaderOp] = []
    redirect = None
    for f in specs:
        kind = f.get("type")
        if kind in ("RequestHeaderModifier", "ResponseHeaderModifier"):
            mod = f.get("requestHeaderModifier" if kind == "RequestHeaderModifier" else
                        "responseHeaderModifier") or {}
            response = kind == "ResponseHeaderModifier"
            for op in ("set", "add"):
                for h in mod.get(op) or []:
                    if not set(h.get("name", "")) <= SAFE_HEADER or not h.get("name"):
                        return (), None, f"header name {h.get('name')!r} is not supported"
                    ops.append(HeaderOp(op, h["name"], str(h.get("value", "")), response))
            for name in mod.get("remove") or []:
                if not set(name) <= SAFE_HEADER or not name:
                    return (), None, f"header name {name!r} is not supported"
                ops.append(HeaderOp("remove", name, "", response))
        elif kind == "RequestRedirect":
            r = f.get("requestRedirect") or {}
            path = r.get("path") or {}
            if path and path.get("type") != "ReplaceFullPath":
                return (), None, f"redirect path {path.get('type')} is not supported"
            host = str(r.get("hostname") or "")
            if not set(host) <= SAFE_HEADER:
                return (), None, f"redirect hostname {host!r} is not supported"
            redirect = Redirect(str(r.get("scheme") or ""), host, r.get("port"),
                                str(path.get("replaceFullPath") or ""), int(r.get("statusCode") or 302))
        else:
            return (), None, f"filter {kind} is not supported"
    return tuple(ops), redirect, ""


def _emit(rules: list[_Rule], hosts: list[str], lst: _Listener, ns: str, name: str, out: Result) -> None:
    scheme = "https" if lst.spec.get("protocol") == "HTTPS" else "http"
    for rule in rules:
        for host in hosts:
            kind = host_kind(host, suffix_wildcards=True) if host else ANY
            for path, exact, headers, method, queries in rule.matches:
                out.routes.append(Route(host, kind, path, exact, rule.backend or "", headers,
                                        f"HTTPRoute {ns}/{name}", method=method, queries=queries,
                                        error_share=1.0 if rule.backend is None else rule.error_share,
                                        scheme=scheme))


async def ensure_class(client: Client) -> None:
    """GatewayClass `nodeagent` for our controller, created when absent."""
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GatewayClass",
            "metadata": {"name": CLASS_NAME, "labels": {"app.kubernetes.io/managed-by": "nodeagent"}},
            "spec": {"controllerName": CONTROLLER_NAME,
                     "description": "Gateways served by every node's HAProxy (nodeagent ingress)"}}
    try:
        await client.create(RESOURCES["gatewayclasses"], body)
    except ClientError as e:
        if not e.already_exists:
            raise
