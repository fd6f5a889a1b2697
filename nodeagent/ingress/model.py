"""The desired model of the proxy: which request goes where, from Ingresses, Services, EndpointSlices and
Secrets (and Gateway API routes, `gateway.py`). Pure: objects in, a `Desired` out; no I/O.

The matching rules are the Ingress spec's, as ingress-nginx implements them: a request first picks its
host group (an exact host, else the longest matching wildcard, else the rules without a host), then the
longest matching path in that group (Exact before Prefix for the same path); a request matching no path
of its host goes to the default backend (an Ingress's `spec.defaultBackend`, else a 404). Backends are a
Service's ready endpoints from its EndpointSlices (ingress-nginx's model: the proxy talks to the pods,
not to the ClusterIP). A backend that cannot be resolved answers 503 and a problem is reported for its
Ingress; the rest keep serving.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Obj = dict[str, Any]

CLASS_NAME = "nodeagent"
CONTROLLER = "nodeagent.io/ingress-controller"
DEFAULT_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"
LEGACY_CLASS_ANNOTATION = "kubernetes.io/ingress.class"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
TLS_SECRET_TYPE = "kubernetes.io/tls"

# how a route's host matches: one exact name, `*.` one label deep (Ingress), `*.` any depth (Gateway API)
EXACT, WILDCARD_LABEL, WILDCARD_SUFFIX, ANY = "exact", "wildcard", "suffix", "any"


@dataclasses.dataclass(frozen=True)
class Endpoint:
    ip: str
    port: int


@dataclasses.dataclass(frozen=True)
class ServiceRef:
    """One Service port a route sends to, by the port's number or name, with the share it gets."""

    namespace: str
    name: str
    port: int | str
    weight: int = 1


@dataclasses.dataclass(frozen=True)
class HeaderOp:
    """A header change on the way to the backend (or back, `response`): set, add or remove."""

    op: str  # "set" | "add" | "remove"
    name: str
    value: str = ""
    response: bool = False


@dataclasses.dataclass(frozen=True)
class Redirect:
    """An answer redirecting the request (Gateway API's RequestRedirect): "" keeps the request's part."""

    scheme: str = ""
    hostname: str = ""
    port: int | None = None
    path: str = ""  # a full replacement path
    code: int = 302


@dataclasses.dataclass(frozen=True)
class Backend:
    """One proxy backend: the endpoints of one or more Service ports, each with its weight (0-256), and
    what is done to the requests it takes (header changes, or a redirect instead of a server)."""

    name: str
    servers: tuple[tuple[Endpoint, int], ...]
    what: str  # for logs and the config's comments: "ns/svc:port"
    header_ops: tuple[HeaderOp, ...] = ()
    redirect: Redirect | None = None


@dataclasses.dataclass(frozen=True)
class HeaderMatch:
    name: str
    value: str
    regex: bool = False


@dataclasses.dataclass(frozen=True)
class Route:
    host: str  # "" for any host; a wildcard keeps its "*." prefix
    host_kind: str
    path: str  # "" matches every path
    exact: bool  # an Exact path match; else an element-wise prefix
    backend: str  # a Backend's name
    headers: tuple[HeaderMatch, ...] = ()
    origin: str = ""  # "Ingress ns/name" or "HTTPRoute ns/name"
    method: str = ""  # "": any
    queries: tuple[HeaderMatch, ...] = ()  # query parameters
    error_share: float = 0.0  # the share of requests answered 500 (Gateway API's invalid backendRefs)
    scheme: str = ""  # "": both; "http" or "https": requests on that listener only


@dataclasses.dataclass(frozen=True)
class Certificate:
    """A TLS certificate and key (PEM) served to the SNI names of `hosts`."""

    name: str
    pem: bytes
    hosts: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Problem:
    """Something an object asks for that cannot be served; becomes a Warning event on it."""

    kind: str
    namespace: str
    name: str
    reason: str
    message: str


@dataclasses.dataclass(frozen=True)
class Desired:
    routes: tuple[Route, ...]  # in precedence order within each host group
    backends: Mapping[str, Backend]
    host_defaults: Mapping[str, str]  # host → the backend for its unmatched paths
    default_backend: str | None  # unmatched hosts and paths; None: the 404 page
    certificates: tuple[Certificate, ...]
    redirect_hosts: tuple[str, ...]  # hosts whose plain HTTP answers 308 to HTTPS
    problems: tuple[Problem, ...] = ()

    def host_groups(self) -> list[tuple[str, str]]:
        """Every (host, kind) with a route, in the order a request tries them: exact names, then the
        longest wildcard first, then the catch-all."""
        seen = {(r.host, r.host_kind) for r in self.routes} | {
            (h, host_kind(h)) for h in self.host_defaults}
        return sorted(seen, key=_group_order)


def _group_order(group: tuple[str, str]) -> tuple[int, int, str]:
    host, kind = group
    rank = {EXACT: 0, WILDCARD_LABEL: 1, WILDCARD_SUFFIX: 1, ANY: 2}[kind]
    return rank, -len(host), host


def host_kind(host: str, suffix_wildcards: bool = False) -> str:
    if not host:
        return ANY
    if host.startswith("*."):
        return WILDCARD_SUFFIX if suffix_wildcards else WILDCARD_LABEL
    return EXACT


def host_matches(host: str, kind: str, request_host: str) -> bool:
    """Does `request_host` (lower case, no port) fall in this host group? (The render does the same in
    the proxy's own terms; this is the rule, for tests and for Gateway listener intersection.)"""
    if kind == ANY:
        return True
    if kind == EXACT:
        return request_host == host
    suffix = host[1:]  # ".example.com"
    if not request_host.endswith(suffix) or len(request_host) == len(suffix):
        return False
    return kind == WILDCARD_SUFFIX or "." not in request_host[:-len(suffix)]


def path_matches(path: str, exact: bool, request_path: str) -> bool:
    """Exact: the same string. Prefix: element-wise on "/"-separated parts, a trailing "/" ignored
    (`/foo` matches `/foo` and `/foo/bar`, not `/foobar`)."""
    if exact:
        return request_path == path
    p = path.rstrip("/")
    return not p or request_path == p or request_path.startswith(p + "/")


def route_order(r: Route) -> tuple[int, int, int, int, int]:
    """Within a host group: the longest path first, Exact before Prefix on the same path, then a method
    match, the most header matches, the most query matches (Gateway API's precedence; an Ingress has only
    paths). Ties keep their order: the oldest object first."""
    return (-len(r.path.rstrip("/") if not r.exact else r.path), 0 if r.exact else 1, 0 if r.method else 1,
            -len(r.headers), -len(r.queries))


# -- Services to backends ----------------------------------------------------------------------------------


class Endpoints:
    """Services and their EndpointSlices, looked up by the routes that name them."""

    def __init__(self, services: Iterable[Obj], slices: Iterable[Obj]) -> None:
        self.services = {(s["metadata"].get("namespace", ""), s["metadata"]["name"]): s for s in services}
        self.slices: dict[tuple[str, str], list[Obj]] = {}
        for sl in slices:
            svc = ((sl.get("metadata") or {}).get("labels") or {}).get(SERVICE_NAME_LABEL)
            if svc:
                self.slices.setdefault((sl["metadata"].get("namespace", ""), svc), []).append(sl)

    def resolve(self, ref: ServiceRef) -> tuple[list[Endpoint], str | None]:
        """The ready endpoints of one Service port, or why there are none that could ever be."""
        svc = self.services.get((ref.namespace, ref.name))
        if svc is None:
            return [], f'service "{ref.namespace}/{ref.name}" not found'
        spec = svc.get("spec") or {}
        if spec.get("type") == "ExternalName":
            return [], f'service "{ref.namespace}/{ref.name}" is of type ExternalName, which is not supported'
        port = _service_port(spec.get("ports") or [], ref.port)
        if port is None:
            return [], f'service "{ref.namespace}/{ref.name}" has no port {ref.port}'
        out: list[Endpoint] = []
        for sl in sorted(self.slices.get((ref.namespace, ref.name), []), key=lambda s: s["metadata"]["name"]):
            if sl.get("addressType", "IPv4") != "IPv4":
                continue
            target = next((p.get("port") for p in sl.get("ports") or []
                           if (p.get("name") or "") == (port.get("name") or "")
                           and (p.get("protocol") or "TCP") == "TCP"), None)
            if not target:
                continue
            for ep in sl.get("endpoints") or []:
                if (ep.get("conditions") or {}).get("ready") is False:
                    continue
                out.extend(Endpoint(a, int(target)) for a in ep.get("addresses") or [])
        return sorted(set(out), key=lambda e: (e.ip, e.port)), None


def _service_port(ports: Sequence[Obj], want: int | str) -> Obj | None:
    for p in ports:
        if (p.get("protocol") or "TCP") != "TCP":
            continue
        if p.get("name" if isinstance(want, str) else "port") == want:
            return p
    return None


MAX_WEIGHT = 256


def backend_for(refs: Sequence[ServiceRef], endpoints: Endpoints) -> tuple[Backend, list[str]]:
    """One backend for a weighted set of Service ports: each ref's weight is shared among its endpoints
    (Gateway API's meaning), scaled into the proxy's 1..256 server weights. Returns the problems too."""
    problems: list[str] = []
    resolved: list[tuple[ServiceRef, list[Endpoint]]] = []
    for ref in refs:
        eps, why = endpoints.resolve(ref)
        if why:
            problems.append(why)
        if ref.weight > 0 and eps:
            resolved.append((ref, eps))
    servers: list[tuple[Endpoint, int]] = []
    if len(resolved) == 1:
        servers = [(e, 1) for e in resolved[0][1]]
    elif resolved:
        # per-endpoint share = weight / endpoints; scaled so the largest share is MAX_WEIGHT
        shares = [(e, ref.weight / len(eps)) for ref, eps in resolved for e in eps]
        top = max(s for _, s in shares)
        servers = [(e, max(1, round(s / top * MAX_WEIGHT))) for e, s in shares]
    what = ",".join(f"{r.namespace}/{r.name}:{r.port}" + (f"*{r.weight}" if len(refs) > 1 else "")
                    for r in refs)
    name = "be_" + hashlib.sha256(what.encode()).hexdigest()[:12]
    return Backend(name, tuple(servers), what), problems


# -- Ingresses ---------------------------------------------------------------------------------------------


def is_default_class(ic: Obj) -> bool:
    return ((ic.get("metadata") or {}).get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"


def ours(ing: Obj, classes: Iterable[Obj], class_name: str = CLASS_NAME) -> bool:
    """An Ingress this controller serves: its class names ours (the field, or the deprecated annotation),
    or it names none and ours is the default class."""
    spec = ing.get("spec") or {}
    name = spec.get("ingressClassName") or \
        ((ing.get("metadata") or {}).get("annotations") or {}).get(LEGACY_CLASS_ANNOTATION)
    if name:
        return bool(name == class_name)
    return any(c["metadata"]["name"] == class_name and is_default_class(c) for c in classes)


def _ingress_ref(namespace: str, backend: Obj) -> ServiceRef | str:
    svc = backend.get("service")
    if not svc:
        res = backend.get("resource") or {}
        return f'resource backend {res.get("kind", "?")} "{res.get("name", "")}" is not supported'
    port = svc.get("port") or {}
    number_or_name = port["number"] if "number" in port else port.get("name", "")
    return ServiceRef(namespace, svc.get("name", ""), number_or_name)


def _age(o: Obj) -> tuple[str, str, str]:
    m = o.get("metadata") or {}
    return m.get("creationTimestamp") or "", m.get("namespace", ""), m.get("name", "")


def build(ingresses: Iterable[Obj], services: Iterable[Obj], slices: Iterable[Obj], secrets: Iterable[Obj],
          extra_routes: Sequence[Route] = (), extra_backends: Mapping[str, Backend] | None = None,
          extra_problems: Sequence[Problem] = (), extra_certificates: Sequence[Certificate] = ()) -> Desired:
    """The proxy's desired model from the Ingresses already filtered to ours (oldest first wins a
    conflict, as ingress-nginx), the cluster's Services, EndpointSlices and TLS Secrets, and the Gateway
    API's routes and backends (`gateway.py`)."""
    endpoints = Endpoints(services, slices)
    secret_by = {(s["metadata"].get("namespace", ""), s["metadata"]["name"]): s for s in secrets}
    backends: dict[str, Backend] = dict(extra_backends or {})
    routes: list[Route] = list(extra_routes)
    problems: list[Problem] = list(extra_problems)
    host_defaults: dict[str, str] = {}
    default_backend: str | None = None
    certs: dict[str, Certificate] = {}
    cert_hosts: set[str] = set()
    redirect: set[str] = set()
    taken: set[tuple[str, str, bool]] = set()

    for ing in sorted(ingresses, key=_age):
        ns, name = ing["metadata"].get("namespace", ""), ing["metadata"]["name"]
        spec = ing.get("spec") or {}

        def problem(reason: str, message: str, ns: str = ns, name: str = name) -> None:
            problems.append(Problem("Ingress", ns, name, reason, message))

        def backend(b: Obj, ns: str = ns) -> str | None:
            ref = _ingress_ref(ns, b)
            if isinstance(ref, str):
                problem("UnsupportedBackend", ref)
                return None
            be, why = backend_for([ref], endpoints)
            for w in why:
                problem("BackendNotFound", f"{w}: requests to it answer 503")
            backends.setdefault(be.name, be)
            return be.name

        own_default = backend(spec["defaultBackend"]) if spec.get("defaultBackend") else None
        if own_default and default_backend is None:
            default_backend = own_default
        for rule in spec.get("rules") or []:
            host = (rule.get("host") or "").lower()
            kind = host_kind(host)
            if own_default and host:
                host_defaults.setdefault(host, own_default)
            for p in ((rule.get("http") or {}).get("paths") or []):
                path = p.get("path") or "/"
                exact = p.get("pathType") == "Exact"
                be = backend(p.get("backend") or {})
                if be is None:
                    continue
                if (host, path, exact) in taken:  # an older Ingress has this host and path
                    problem("Conflict", f'host "{host or "*"}" path "{path}" is already served by an older '
                                        "Ingress; this rule is not used")
                    continue
                taken.add((host, path, exact))
                routes.append(Route(host, kind, path, exact, be, origin=f"Ingress {ns}/{name}"))
        for tls in spec.get("tls") or []:
            hosts = tuple(h.lower() for h in tls.get("hosts") or [])
            redirect.update(hosts)
            secret_name = tls.get("secretName")
            if not secret_name:
                continue
            pem, why = tls_pem(secret_by.get((ns, secret_name)), ns, secret_name)
            if why:
                problem("SecretNotFound" if "not found" in why else "InvalidSecret",
                        f"{why}: {', '.join(hosts) or 'its hosts'} get the default certificate")
                continue
            fresh = tuple(h for h in hosts if h not in cert_hosts)
            cert_hosts.update(fresh)
            if fresh or not hosts:
                key = f"{ns}_{secret_name}"
                prev = certs.get(key)
                certs[key] = Certificate(key, pem, (prev.hosts if prev else ()) + fresh)

    for c in extra_certificates:
        fresh = tuple(h for h in c.hosts if h not in cert_hosts)
        cert_hosts.update(fresh)
        if fresh or not c.hosts:
            certs.setdefault(c.name, dataclasses.replace(c, hosts=fresh))
    ordered = sorted(routes, key=route_order)
    return Desired(tuple(ordered), backends, host_defaults, default_backend, tuple(certs.values()),
                   tuple(sorted(redirect)), tuple(problems))


def tls_pem(secret: Obj | None, ns: str, name: str) -> tuple[bytes, str | None]:
    """The certificate chain and key of a Secret as one PEM, or why not: `tls.crt` and `tls.key`, whatever
    the Secret's type, as ingress-nginx's getPemCertificate reads them (and words their absence)."""
    import base64

    if secret is None:
        return b"", f'secret "{ns}/{name}" not found'
    data = secret.get("data") or {}
    if "tls.crt" not in data or "tls.key" not in data:
        if data.get("ca.crt"):
            return b"", f'secret "{ns}/{name}" holds a CA certificate (ca.crt) but no keypair to serve'
        return b"", f'secret "{ns}/{name}" contains no keypair or CA certificate'
    try:
        crt = base64.b64decode(data.get("tls.crt") or "")
        key = base64.b64decode(data.get("tls.key") or "")
    except ValueError:
        return b"", f'secret "{ns}/{name}": tls.crt or tls.key is not base64'
    why = check_key_pair(crt, key)
    if why:
        return b"", f'secret "{ns}/{name}": {why}'
    return crt.rstrip(b"\n") + b"\n" + key.rstrip(b"\n") + b"\n", None


def check_key_pair(crt: bytes, key: bytes) -> str | None:
    """Why this PEM certificate and key cannot be served (a bad one would fail the whole config's
    validation, taking every other host with it), or None."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    try:
        cert = x509.load_pem_x509_certificate(crt)
    except ValueError:
        return "tls.crt is not a PEM certificate"
    try:
        private = serialization.load_pem_private_key(key, None)
    except (ValueError, TypeError):
        return "tls.key is not an unencrypted PEM private key"
    pem = serialization.Encoding.PEM
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if cert.public_key().public_bytes(pem, spki) != private.public_key().public_bytes(pem, spki):
        return "tls.key does not match the certificate in tls.crt"
    return None
