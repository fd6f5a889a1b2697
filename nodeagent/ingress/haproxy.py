"""The desired model (`model.Desired`) rendered as one HAProxy configuration. Pure: text out, no I/O.

Every backend gets a fixed number of server slots (a power of two, at least `MIN_SLOTS`), the unused ones
disabled. Two renders that differ only in which endpoints fill the slots have the same `structure`, so the
supervisor moves endpoints through HAProxy's runtime API (`set server … addr`) without a reload; anything
else (a route, a certificate, a backend that outgrew its slots) is a new structure: validate, then reload.

Every literal that came from the API is written as a quoted argument after `--`, so no host, path or
header value can add a directive or a flag to the configuration.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from nodeagent.ingress.model import ANY, EXACT, WILDCARD_LABEL, Backend, Desired, Route

MIN_SLOTS = 4
NOT_FOUND_BACKEND = "nodeagent_default_404"
ERROR_BACKEND = "nodeagent_invalid_backend_500"
PARKED = "127.0.0.1:1"  # where an unused slot points (disabled: never used)


@dataclasses.dataclass(frozen=True)
class Listen:
    address: str  # "" or "0.0.0.0": every address
    http_port: int
    https_port: int
    metrics_port: int = 0  # HAProxy's Prometheus exporter at /metrics; 0: none


@dataclasses.dataclass(frozen=True)
class Files:
    admin_socket: str  # the runtime API (level admin, exposes the listeners for seamless reloads)
    default_certificate: str  # PEM, cert + key
    crt_list: str  # SNI → certificate, one line per certificate


Slot = tuple[str, int, int] | None  # (ip, port, weight), or unused


@dataclasses.dataclass(frozen=True)
class Rendered:
    text: str
    structure: str  # the text with every slot's contents left out
    slots: dict[str, tuple[Slot, ...]]  # backend → its server slots s1..sN
    crt_list: str  # the crt-list file's text (paths of the certificate files)


def quote(value: str) -> str:
    """One HAProxy argument: double-quoted, with backslash, quote and `$` escaped (HAProxy expands
    environment variables inside double quotes)."""
    if any(ord(c) < 0x20 or c == "\x7f" for c in value):
        raise ValueError(f"control character in {value!r}")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def slot_count(n: int) -> int:
    size = MIN_SLOTS
    while size < n:
        size *= 2
    return size


def _host_condition(host: str, kind: str) -> str:
    """An anonymous ACL on the request's host (lower case, port removed into txn.host)."""
    if kind == ANY:
        return ""
    if kind == EXACT:
        return "{ var(txn.host) -m str -- " + quote(host) + " }"
    suffix = re.escape(host[1:])
    label = "[^.]+" if kind == WILDCARD_LABEL else ".+"
    return "{ var(txn.host) -m reg -- " + quote(f"^{label}{suffix}$") + " }"


def _path_condition(route: Route) -> str:
    if route.exact:
        return "{ path -m str -- " + quote(route.path) + " }"
    p = route.path.rstrip("/")
    if not p:
        return ""
    return "{ path -m str -- " + quote(p) + " } || { path -m beg -- " + quote(p + "/") + " }"


def _request_conditions(route: Route) -> list[str]:
    """The scheme, method, header and query parameter conditions of a route (names are checked to be
    plain tokens where they are read; values are quoted)."""
    out = []
    if route.scheme:
        out.append("{ ssl_fc }" if route.scheme == "https" else "!{ ssl_fc }")
    if route.method:
        out.append("{ method -m str -- " + quote(route.method) + " }")
    for h in route.headers:
        how = "reg" if h.regex else "str"
        out.append("{ req.hdr(" + h.name + ") -m " + how + " -- " + quote(h.value) + " }")
    for q in route.queries:
        how = "reg" if q.regex else "str"
        out.append("{ url_param(" + q.name + ") -m " + how + " -- " + quote(q.value) + " }")
    return out


def _route_lines(route: Route, host_cond: str) -> list[str]:
    """`use_backend` lines for one route (HAProxy has no parentheses: an OR of path forms repeats the
    rest of the condition)."""
    path = _path_condition(route)
    rest = " ".join(c for c in [host_cond, *_request_conditions(route)] if c)
    alternatives = path.split(" || ") if path else [""]
    out = []
    for alt in alternatives:
        cond = " ".join(c for c in (rest, alt) if c)
        if route.error_share >= 1 or not route.backend:
            out.append(f"    use_backend {ERROR_BACKEND}" + (f" if {cond}" if cond else ""))
            continue
        if route.error_share > 0:  # that share of the requests: 500, the rest to the backend
            share = "{ rand(10000) -m int lt " + str(round(route.error_share * 10000)) + " }"
            out.append(f"    use_backend {ERROR_BACKEND} if {cond} {share}".replace("if  ", "if "))
        out.append(f"    use_backend {route.backend}" + (f" if {cond}" if cond else ""))
    return out


def _backend_actions(be: Backend) -> list[str]:
    """What a backend does to the requests it takes: header changes, or a redirect answered here."""
    out = []
    for op in be.header_ops:
        side = "http-response" if op.response else "http-request"
        if op.op == "remove":
            out.append(f"    {side} del-header {op.name}")
        else:
            out.append(f"    {side} {op.op}-header {op.name} {quote(op.value)}")
    r = be.redirect
    if r is not None:
        # Gateway API: an unset scheme, hostname or path keeps the request's; an unset port keeps the
        # request's unless the scheme or hostname changes (then the scheme's default port)
        scheme = r.scheme or "%[ssl_fc,iif(https,http)]"
        if r.port is not None:
            authority = f"{r.hostname or '%[var(txn.host)]'}:{r.port}"
        elif r.scheme or r.hostname:  # the new scheme's default port
            authority = r.hostname or "%[var(txn.host)]"
        else:
            authority = "%[req.hdr(host)]"
        path = r.path or "%[pathq]"
        location = quote(f"{scheme}://{authority}{path}")
        out.append(f"    http-request redirect location {location} code {r.code}")
    return out


def render(desired: Desired, listen: Listen, files: Files, cert_paths: Sequence[str]) -> Rendered:
    """The configuration for `desired`; `cert_paths[i]` is where `desired.certificates[i]` is written."""
    addr = "" if listen.address in ("", "0.0.0.0") else listen.address
    https_redirect = ("redirect scheme https code 308" if listen.https_port == 443 else
                      "redirect location https://%[var(txn.host)]:" + str(listen.https_port) +
                      "%[pathq] code 308")
    head = [
        "# rendered by nodeagent ingress from Ingress and Gateway API objects; edits are overwritten",
        "global",
        f"    stats socket {files.admin_socket} mode 600 level admin expose-fd listeners",
        "    hard-stop-after 60s",
        "    log stderr format short local0 notice",
        "",
        "defaults",
        "    mode http",
        "    log global",
        "    option dontlognull",
        "    option forwardfor",
        # a soft-stopping worker (a reload) answers an idle keep-alive connection's next request with
        # Connection: close instead of closing it under the client (which would see a failed request)
        "    option idle-close-on-response",
        "    timeout connect 5s",
        "    timeout client 60s",
        "    timeout server 60s",
        "    timeout http-request 10s",
        "    timeout http-keep-alive 60s",
        "    timeout tunnel 1h",
        "",
        "frontend nodeagent_ingress",
        f"    bind {addr}:{listen.http_port}",
        f"    bind {addr}:{listen.https_port} ssl crt {files.default_certificate} crt-list {files.crt_list} "
        "alpn h2,http/1.1",
        "    http-request set-var(txn.host) req.hdr(host),field(1,:),lower",
        "    http-request set-header X-Forwarded-Proto https if { ssl_fc }",
        "    http-request set-header X-Forwarded-Proto http if !{ ssl_fc }",
    ]
    body: list[str] = []
    for host in desired.redirect_hosts:
        cond = _host_condition(host, WILDCARD_LABEL if host.startswith("*.") else EXACT)
        body.append(f"    http-request {https_redirect} if !{{ ssl_fc }} {cond}")
    for host, kind in desired.host_groups():
        cond = _host_condition(host, kind)
        body.append(f"    # host {host or '*'}")
        for r in (r for r in desired.routes if r.host == host and r.host_kind == kind):
            body += _route_lines(r, cond)
        if kind != ANY:  # a known host's unmatched paths do not fall through to another host's rules
            fallback = desired.host_defaults.get(host) or desired.default_backend or NOT_FOUND_BACKEND
            body.append(f"    use_backend {fallback} if {cond}")
    body.append(f"    default_backend {desired.default_backend or NOT_FOUND_BACKEND}")
    body.append("")

    slots: dict[str, tuple[Slot, ...]] = {}
    backends: list[str] = []
    skeleton: list[str] = []
    for name in sorted(desired.backends):
        be = desired.backends[name]
        filled: list[Slot] = [(e.ip, e.port, w) for e, w in be.servers]
        filled += [None] * (slot_count(len(filled)) - len(filled))
        slots[name] = tuple(filled)
        lines = [f"backend {name}", f"    # {be.what}", "    balance roundrobin", *_backend_actions(be)]
        backends += lines
        skeleton += lines + [f"    slots {len(filled)}"]
        for i, s in enumerate(filled, 1):
            backends.append(f"    server s{i} {s[0]}:{s[1]} weight {s[2]}" if s else
                            f"    server s{i} {PARKED} disabled")
        backends.append("")
    tail = [f"backend {NOT_FOUND_BACKEND}",
            '    http-request return status 404 content-type text/plain string "default backend - 404"', "",
            f"backend {ERROR_BACKEND}",
            '    http-request return status 500 content-type text/plain string "invalid backend reference"',
            ""]
    crt_list = "".join((f"{path} {' '.join(c.hosts)}".rstrip() + "\n")
                       for c, path in zip(desired.certificates, cert_paths, strict=True))
    if listen.metrics_port:
        tail += ["frontend nodeagent_metrics", f"    bind {addr}:{listen.metrics_port}",
                 "    http-request use-service prometheus-exporter if { path /metrics }",
                 "    http-request return status 404", ""]
    text = "\n".join(head + body + backends + tail)
    structure = "\n".join(head + body + skeleton + tail) + "\n" + crt_list
    return Rendered(text, structure, slots, crt_list)
