"""The HAProxy render: what `haproxy -c` accepts, the quoting of literals from the API, and the
structure that decides between a runtime update and a reload."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from pathlib import Path

import pytest

from nodeagent.ingress.haproxy import Files, Listen, quote, render, slot_count
from nodeagent.ingress.model import EXACT, Backend, Desired, Endpoint, HeaderMatch, Route, build
from nodeagent.pki import self_signed
from tests.unit.ingress.objects import backend, endpoint_slice, ingress, rule, service, tls_secret


def files(tmp: Path) -> Files:
    crt, key = self_signed("default")
    (tmp / "default.pem").write_bytes(crt + key)
    return Files(str(tmp / "admin.sock"), str(tmp / "default.pem"), str(tmp / "certs.list"))


def haproxy_check(tmp: Path, text: str, crt_list: str) -> subprocess.CompletedProcess[str]:
    (tmp / "certs.list").write_text(crt_list)
    (tmp / "haproxy.cfg").write_text(text)
    return subprocess.run(["haproxy", "-c", "-f", str(tmp / "haproxy.cfg")], capture_output=True, text=True,
                          check=False)


needs_haproxy = pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")


@needs_haproxy
def test_a_full_render_validates(tmp_path: Path) -> None:
    secret = tls_secret("a-tls", "a.com")
    ing = ingress("a", [rule("a.com", ("/", "Prefix", backend("web", 80)),
                             ("/x", "Exact", backend("web", 80))),
                        rule("*.b.com", ("/api", "Prefix", backend("nope", 80)))],
                  tls=[{"hosts": ["a.com"], "secretName": "a-tls"}], defaultBackend=backend("web", 80))
    d = build([ing], [service("web", [("http", 80)])],
              [endpoint_slice("web", [("http", 8000)], ["10.0.0.1", "10.0.0.2"])], [secret])
    (tmp_path / "a.pem").write_bytes(d.certificates[0].pem)
    r = render(d, Listen("", 8080, 8443), files(tmp_path), [str(tmp_path / "a.pem")])
    p = haproxy_check(tmp_path, r.text, r.crt_list)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "redirect location https://%[var(txn.host)]:8443%[pathq] code 308" in r.text
    assert r.crt_list == f"{tmp_path / 'a.pem'} a.com\n"


@needs_haproxy
def test_hostile_literals_stay_arguments(tmp_path: Path) -> None:
    evil = '/a" }\n    use_backend x if { always_true'.replace("\n", "")
    be = Backend("be_1", ((Endpoint("10.0.0.1", 80), 1),), "ns/x:80")
    d = Desired((Route("a.com", EXACT, evil + "$HOME\\", True, "be_1",
                       (HeaderMatch("x-h", '-v "q" $X'),)),), {"be_1": be}, {}, None, (), ())
    r = render(d, Listen("127.0.0.1", 8080, 8443), files(tmp_path), [])
    p = haproxy_check(tmp_path, r.text, r.crt_list)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "always_true\\$HOME\\\\" in r.text
    with pytest.raises(ValueError):
        quote("a\nb")


def test_endpoints_alone_keep_the_structure() -> None:
    be = Backend("be_1", ((Endpoint("10.0.0.1", 80), 1),), "ns/x:80")
    d = Desired((Route("", "any", "/", False, "be_1"),), {"be_1": be}, {}, None, (), ())
    f = Files("/s", "/d.pem", "/c.list")
    a = render(d, Listen("", 80, 443), f, [])
    two = ((Endpoint("10.0.0.2", 81), 1), (Endpoint("10.0.0.3", 81), 1))
    moved = dataclasses.replace(d, backends={"be_1": Backend("be_1", two, "ns/x:80")})
    b = render(moved, Listen("", 80, 443), f, [])
    assert a.structure == b.structure and a.text != b.text
    assert b.slots["be_1"] == (("10.0.0.2", 81, 1), ("10.0.0.3", 81, 1), None, None)
    grown = dataclasses.replace(d, backends={"be_1": Backend(
        "be_1", tuple((Endpoint(f"10.0.0.{i}", 80), 1) for i in range(5)), "ns/x:80")})
    assert render(grown, Listen("", 80, 443), f, []).structure != a.structure
    assert [slot_count(n) for n in (0, 4, 5, 9)] == [4, 4, 8, 16]


def test_weights_split_by_backend_ref_then_endpoint() -> None:
    from nodeagent.ingress.model import Endpoints, ServiceRef, backend_for

    eps = Endpoints([service("a", [("", 80)]), service("b", [("", 80)])],
                    [endpoint_slice("a", [("", 80)], ["10.0.0.1", "10.0.0.2"]),
                     endpoint_slice("b", [("", 80)], ["10.0.1.1"])])
    be, problems = backend_for([ServiceRef("default", "a", 80, 80), ServiceRef("default", "b", 80, 20)], eps)
    assert problems == []
    weights = {e.ip: w for e, w in be.servers}
    # a's 80 shared by two endpoints (40 each), b's 20 on one: 40:40:20, scaled to 256 at the top
    assert weights == {"10.0.0.1": 256, "10.0.0.2": 256, "10.0.1.1": 128}


@needs_haproxy
def test_gateway_conditions_and_error_shares_validate(tmp_path: Path) -> None:
    be = Backend("be_1", ((Endpoint("10.0.0.1", 80), 1),), "ns/x:80")
    routes = (Route("*.a.com", "suffix", "/", False, "be_1", (HeaderMatch("x-v", "^v[0-9]+$", True),),
                    method="POST", queries=(HeaderMatch("q", "1"),), error_share=0.25, scheme="https"),
              Route("", "any", "/broken", True, "", error_share=1.0))
    d = Desired(routes, {"be_1": be}, {}, None, (), ())
    r = render(d, Listen("127.0.0.1", 8080, 8443), files(tmp_path), [])
    p = haproxy_check(tmp_path, r.text, r.crt_list)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "{ rand(10000) -m int lt 2500 }" in r.text
    assert '{ url_param(q) -m str -- "1" }' in r.text and '{ method -m str -- "POST" }' in r.text
    assert 'use_backend nodeagent_invalid_backend_500 if { path -m str -- "/broken" }' in r.text


@needs_haproxy
def test_header_changes_and_redirects_validate(tmp_path: Path) -> None:
    from nodeagent.ingress.model import HeaderOp, Redirect

    ops = (HeaderOp("set", "X-Set", 'a "b" $c'), HeaderOp("add", "X-Add", "2"), HeaderOp("remove", "X-Gone"),
           HeaderOp("set", "X-Resp", "r", response=True))
    bes = {"be_h": Backend("be_h", ((Endpoint("10.0.0.1", 80), 1),), "ns/x:80", header_ops=ops)}
    redirects = [Redirect(), Redirect(scheme="https", code=301), Redirect(hostname="example.org"),
                 Redirect(port=8443, path="/new")]
    for i, redirect in enumerate(redirects):
        bes[f"be_r{i}"] = Backend(f"be_r{i}", (), "redirect", redirect=redirect)
    routes = tuple(Route("", "any", f"/{name}", True, name) for name in bes)
    r = render(Desired(routes, bes, {}, None, (), ()), Listen("127.0.0.1", 8080, 8443), files(tmp_path), [])
    p = haproxy_check(tmp_path, r.text, r.crt_list)
    assert p.returncode == 0, p.stdout + p.stderr
    assert 'http-request set-header X-Set "a \\"b\\" \\$c"' in r.text
    assert "http-request del-header X-Gone" in r.text and 'http-response set-header X-Resp "r"' in r.text
    assert 'redirect location "https://%[var(txn.host)]%[pathq]" code 301' in r.text
    keep = '"%[ssl_fc,iif(https,http)]://%[req.hdr(host)]%[pathq]" code 302'
    assert f"redirect location {keep}" in r.text
    assert 'redirect location "%[ssl_fc,iif(https,http)]://%[var(txn.host)]:8443/new" code 302' in r.text
