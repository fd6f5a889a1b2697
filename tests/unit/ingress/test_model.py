"""The desired model: the Ingress spec's host and path matching and precedence, backends from ready
endpoints by port name or number, TLS, and what cannot be served reported without hiding the rest."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.ingress.model import (
    ANY,
    EXACT,
    WILDCARD_LABEL,
    WILDCARD_SUFFIX,
    Desired,
    build,
    host_kind,
    host_matches,
    ours,
    path_matches,
)
from tests.unit.ingress.objects import backend, endpoint_slice, ingress, rule, service, tls_secret


@pytest.mark.parametrize(("path", "exact", "request_path", "want"), [
    # the table of the Ingress spec's path matching examples
    ("/", False, "/anything", True),
    ("/foo", False, "/foo", True),
    ("/foo", False, "/foo/", True),
    ("/foo/", False, "/foo", True),
    ("/aaa/bb", False, "/aaa/bbb", False),
    ("/aaa/bbb", False, "/aaa/bbb", True),
    ("/aaa/bbb/", False, "/aaa/bbb", True),
    ("/aaa/bbb", False, "/aaa/bbb/", True),
    ("/aaa/bbb", False, "/aaa/bbb/ccc", True),
    ("/aaa/bbb", False, "/aaa/bbbxyz", False),
    ("/foo", True, "/foo", True),
    ("/foo", True, "/bar", False),
    ("/foo", True, "/foo/", False),
    ("/foo/", True, "/foo", False),
])
def test_path_matching_is_the_specs(path: str, exact: bool, request_path: str, want: bool) -> None:
    assert path_matches(path, exact, request_path) is want


@pytest.mark.parametrize(("host", "request_host", "want"), [
    ("foo.bar.com", "foo.bar.com", True),
    ("foo.bar.com", "baz.bar.com", False),
    ("*.foo.com", "bar.foo.com", True),
    ("*.foo.com", "baz.bar.foo.com", False),  # one label only, for an Ingress
    ("*.foo.com", "foo.com", False),
])
def test_ingress_host_matching(host: str, request_host: str, want: bool) -> None:
    assert host_matches(host, host_kind(host), request_host) is want


def test_gateway_wildcards_match_any_depth() -> None:
    assert host_matches("*.foo.com", WILDCARD_SUFFIX, "a.b.foo.com")
    assert not host_matches("*.foo.com", WILDCARD_SUFFIX, "foo.com")


def route_for(d: Desired, host: str, path: str) -> str | None:
    """Which backend a request goes to, by the model's own precedence (what the render must encode)."""
    for h, kind in d.host_groups():
        if not host_matches(h, kind, host):
            continue
        for r in d.routes:
            if r.host == h and r.host_kind == kind and path_matches(r.path, r.exact, path):
                return r.backend
        if kind != ANY:
            return d.host_defaults.get(h) or d.default_backend
    return d.default_backend


def cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    services = [service("web", [("http", 80)]), service("api", [("", 8080)]), service("other", [("web", 81)])]
    slices = [endpoint_slice("web", [("http", 8000)], ["10.0.0.1", "10.0.0.2"], not_ready=("10.0.0.9",)),
              endpoint_slice("api", [("", 9000)], ["10.0.1.1"]),
              endpoint_slice("other", [("web", 9100)], ["10.0.2.1"])]
    return services, slices


def test_precedence_host_then_longest_path_exact_first() -> None:
    services, slices = cluster()
    ing = ingress("a", [rule("foo.com", ("/", "Prefix", backend("web", 80)),
                             ("/api", "Prefix", backend("api", 8080)),
                             ("/api", "Exact", backend("other", "web"))),
                        rule("*.foo.com", ("/", "Prefix", backend("api", 8080))),
                        rule("", ("/catch", "Prefix", backend("other", "web")))])
    d = build([ing], services, slices, [])
    web, api, other = (next(n for n, b in d.backends.items() if b.what.startswith(f"default/{s}:"))
                       for s in ("web", "api", "other"))
    assert route_for(d, "foo.com", "/api") == other  # Exact wins over Prefix on the same path
    assert route_for(d, "foo.com", "/api/v1") == api  # the longest prefix
    assert route_for(d, "foo.com", "/apiary") == web  # element-wise: /api is not a prefix of /apiary
    assert route_for(d, "x.foo.com", "/anything") == api
    assert route_for(d, "foo.com", "/catch") == web  # a known host's rules, not the catch-all's
    assert route_for(d, "unknown.org", "/catch/me") == other
    assert route_for(d, "unknown.org", "/") is None  # the 404 default backend
    assert [h for h, _ in d.host_groups()] == ["foo.com", "*.foo.com", ""]
    assert [k for _, k in d.host_groups()] == [EXACT, WILDCARD_LABEL, ANY]


def test_backends_are_ready_endpoints_by_port_name_or_number() -> None:
    services, slices = cluster()
    d = build([ingress("a", [rule("", ("/web", "Prefix", backend("web", 80)),
                                  ("/other", "Prefix", backend("other", "web")))])], services, slices, [])
    servers = {b.what: sorted((e.ip, e.port) for e, _ in b.servers) for b in d.backends.values()}
    assert servers == {"default/web:80": [("10.0.0.1", 8000), ("10.0.0.2", 8000)],
                       "default/other:web": [("10.0.2.1", 9100)]}
    assert d.problems == ()


def test_missing_service_or_port_is_reported_and_only_that_rule_answers_503() -> None:
    services, slices = cluster()
    d = build([ingress("a", [rule("a.com", ("/", "Prefix", backend("nope", 80)),
                                  ("/ok", "Prefix", backend("web", 80)),
                                  ("/port", "Prefix", backend("web", 81)))])], services, slices, [])
    assert len(d.routes) == 3
    empty = [b.what for b in d.backends.values() if not b.servers]
    assert sorted(empty) == ["default/nope:80", "default/web:81"]
    assert {p.reason for p in d.problems} == {"BackendNotFound"}
    assert any('service "default/nope" not found' in p.message for p in d.problems)
    assert any("has no port 81" in p.message for p in d.problems)


def test_default_backend_and_the_oldest_ingress_wins_a_conflict() -> None:
    services, slices = cluster()
    old = ingress("old", [rule("a.com", ("/", "Prefix", backend("web", 80)))],
                  created="2026-01-01T00:00:00Z", defaultBackend=backend("api", 8080))
    new = ingress("new", [rule("a.com", ("/", "Prefix", backend("other", "web")))],
                  created="2026-02-01T00:00:00Z")
    d = build([new, old], services, slices, [])
    be = {b.what: n for n, b in d.backends.items()}
    assert route_for(d, "a.com", "/") == be["default/web:80"]
    assert d.default_backend == be["default/api:8080"]
    assert [(p.name, p.reason) for p in d.problems] == [("new", "Conflict")]


def test_tls_from_secrets_with_sni_hosts_and_redirects() -> None:
    services, slices = cluster()
    secret = tls_secret("a-tls", "a.com")
    ing = ingress("a", [rule("a.com", ("/", "Prefix", backend("web", 80))),
                        rule("b.com", ("/", "Prefix", backend("web", 80)))],
                  tls=[{"hosts": ["a.com"], "secretName": "a-tls"},
                       {"hosts": ["b.com"], "secretName": "gone"}])
    d = build([ing], services, slices, [secret])
    assert [(c.name, c.hosts) for c in d.certificates] == [("default_a-tls", ("a.com",))]
    assert b"BEGIN CERTIFICATE" in d.certificates[0].pem and b"PRIVATE KEY" in d.certificates[0].pem
    assert d.redirect_hosts == ("a.com", "b.com")  # b.com is served with the default certificate
    assert [(p.reason, p.name) for p in d.problems] == [("SecretNotFound", "a")]


def test_a_secret_whose_key_does_not_match_is_refused() -> None:
    services, slices = cluster()
    good, other = tls_secret("s", "a.com"), tls_secret("t", "a.com")
    good["data"]["tls.key"] = other["data"]["tls.key"]
    ing = ingress("a", [rule("a.com", ("/", "Prefix", backend("web", 80)))],
                  tls=[{"hosts": ["a.com"], "secretName": "s"}])
    d = build([ing], services, slices, [good])
    assert d.certificates == ()
    assert d.problems[0].reason == "InvalidSecret" and "does not match" in d.problems[0].message


def test_which_ingresses_are_ours() -> None:
    default = {"metadata": {"name": "nodeagent",
                            "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}}}
    plain = {"metadata": {"name": "nodeagent"}}
    mine = ingress("a", [])
    none = {**mine, "spec": {}}
    legacy = {**none, "metadata": {**mine["metadata"],
                                   "annotations": {"kubernetes.io/ingress.class": "nodeagent"}}}
    theirs = {**mine, "spec": {"ingressClassName": "nginx"}}
    assert ours(mine, [plain]) and ours(legacy, []) and ours(none, [default])
    assert not ours(none, [plain]) and not ours(theirs, [default])


def test_tls_keys_are_read_from_a_secret_of_any_type() -> None:
    """ingress-nginx's getPemCertificate: `tls.crt` and `tls.key` whatever the Secret's type; one without
    them is refused in its words, and its hosts get the default certificate."""
    services, slices = cluster()
    opaque = {**tls_secret("opaque-tls", "a.com"), "type": "Opaque"}
    empty = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
             "metadata": {"name": "empty", "namespace": "default"}, "data": {"password": "eA=="}}
    ca_only = {**empty, "metadata": {"name": "ca", "namespace": "default"},
               "data": {"ca.crt": opaque["data"]["tls.crt"]}}
    ing = ingress("a", [rule("a.com", ("/", "Prefix", backend("web", 80)))],
                  tls=[{"hosts": ["a.com"], "secretName": "opaque-tls"},
                       {"hosts": ["b.com"], "secretName": "empty"},
                       {"hosts": ["c.com"], "secretName": "ca"}])
    d = build([ing], services, slices, [opaque, empty, ca_only])
    assert [(c.name, c.hosts) for c in d.certificates] == [("default_opaque-tls", ("a.com",))]
    assert [(p.reason, p.message) for p in d.problems] == [
        ("InvalidSecret", 'secret "default/empty" contains no keypair or CA certificate: '
                          "b.com get the default certificate"),
        ("InvalidSecret", 'secret "default/ca" holds a CA certificate (ca.crt) but no keypair to serve: '
                          "c.com get the default certificate")]
