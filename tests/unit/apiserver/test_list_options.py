"""List/watch options as kube-apiserver 1.32 validates and defaults them, and its continue token."""

from __future__ import annotations

import base64
import json

import pytest

from nodeagent.apiserver import list_options as lo
from nodeagent.apiserver.errors import ApiError


def invalid(q: dict[str, str], watch: bool = False) -> tuple[str, list[dict[str, str]]]:
    with pytest.raises(ApiError) as e:
        lo.validate(lo.with_defaults(lo.parse(q, watch)))
    st = e.value.status()
    assert (st["code"], st["reason"], st["details"]["kind"], st["details"]["group"]) == \
        (422, "Invalid", "ListOptions", "meta.k8s.io")
    return st["message"], st["details"]["causes"]


def test_list_validation_messages_are_kubes():
    msg, causes = invalid({"resourceVersionMatch": "NotOlderThan"})
    assert msg == ('ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
                   "resourceVersionMatch is forbidden unless resourceVersion is provided")
    assert causes == [{"reason": "FieldValueForbidden", "field": "resourceVersionMatch",
                       "message": "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is "
                                  "provided"}]
    _, causes = invalid({"resourceVersion": "0", "resourceVersionMatch": "Exact"})
    assert [c["message"] for c in causes] == [
        'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"']
    _, causes = invalid({"resourceVersion": "5", "resourceVersionMatch": "Newest", "continue": "x"})
    assert [c["message"] for c in causes] == [
        "Forbidden: resourceVersionMatch is forbidden when continue is provided",
        'Unsupported value: "Newest": supported values: "Exact", "NotOlderThan", ""']
    _, causes = invalid({"sendInitialEvents": "false"})
    assert causes == [{"reason": "FieldValueForbidden", "field": "sendInitialEvents",
                       "message": "Forbidden: sendInitialEvents is forbidden for list"}]
    for ok in ({}, {"resourceVersion": "0"}, {"resourceVersion": "7", "resourceVersionMatch": "Exact"},
               {"resourceVersion": "7", "resourceVersionMatch": "NotOlderThan", "limit": "3"}):
        lo.validate(lo.parse(ok, False))


def test_watch_validation_and_watchlist_defaults():
    _, causes = invalid({"sendInitialEvents": "true", "allowWatchBookmarks": "true"}, watch=True)
    assert causes == [{"reason": "FieldValueForbidden", "field": "resourceVersionMatch",
                       "message": "Forbidden: sendInitialEvents requires setting resourceVersionMatch to "
                                  "NotOlderThan"}]
    _, causes = invalid({"resourceVersion": "9", "resourceVersionMatch": "NotOlderThan"}, watch=True)
    assert [c["message"] for c in causes] == [
        "Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"]
    _, causes = invalid({"sendInitialEvents": "true", "resourceVersionMatch": "Exact"}, watch=True)
    assert [c["message"] for c in causes] == [
        "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        'Unsupported value: "Exact": supported values: "NotOlderThan"']
    # a legacy watch from "" or "0" is a WatchList (SetListOptionsDefaults); from N it is not
    for rv in ("", "0"):
        o = lo.with_defaults(lo.parse({"resourceVersion": rv, "allowWatchBookmarks": "true"}, True))
        assert (o.send_initial, o.match, o.watch_list) == (True, "NotOlderThan", True)
    o = lo.with_defaults(lo.parse({"resourceVersion": "12"}, True))
    assert (o.send_initial, o.match) == (None, "")
    lo.validate(lo.with_defaults(lo.parse({"sendInitialEvents": "false", "resourceVersion": "12",
                                           "resourceVersionMatch": "NotOlderThan"}, True)))
    with pytest.raises(ApiError) as e:
        lo.parse({"sendInitialEvents": "yes"}, True)
    assert e.value.code == 400


def test_continue_token_is_kubes():
    token = lo.next_page("/registry/pods/d/p7", "/registry/pods/", 42)
    raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    assert raw == {"v": "meta.k8s.io/v1", "rv": 42, "start": "d/p7\x00"}
    assert "=" not in token
    assert lo.decode_continue(token, "/registry/pods/") == ("/registry/pods/d/p7\x00", 42)
    latest = lo.expired_continue("/registry/pods/d/p7\x00", "/registry/pods/")
    st = latest.status()
    assert (st["code"], st["reason"], st["message"]) == (410, "Expired", lo.INCONSISTENT_CONTINUE)
    assert lo.decode_continue(st["metadata"]["continue"], "/registry/pods/") == \
        ("/registry/pods/d/p7\x00", -1)


@pytest.mark.parametrize("body", [
    b"not json", b'{"v":"meta.k8s.io/v2","rv":1,"start":"a"}', b'{"v":"meta.k8s.io/v1","rv":0,"start":"a"}',
    b'{"v":"meta.k8s.io/v1","rv":3,"start":""}', b'{"v":"meta.k8s.io/v1","rv":3,"start":"../secrets/x"}',
])
def test_bad_continue_tokens_are_400(body):
    token = base64.urlsafe_b64encode(body).decode().rstrip("=")
    with pytest.raises(ApiError) as e:
        lo.decode_continue(token, "/registry/pods/")
    assert e.value.code == 400
    assert e.value.message.startswith("invalid continue token: continue key is not valid")


@pytest.mark.parametrize(("accept", "table_after"), [
    ("application/json;as=Table;g=meta.k8s.io;v=v1,application/json", False),
    ("application/json;as=Table;v=v1;g=meta.k8s.io, application/json;q=0.9", False),
    ("application/json", False),
])
def test_an_endpoint_without_table_falls_back_to_the_plain_choice(accept, table_after):
    from nodeagent.apiserver.handlers import Wants
    wants = Wants(accept)
    wants.no_table()
    assert wants.table is table_after


def test_an_endpoint_without_table_refuses_table_alone():
    from nodeagent.apiserver.handlers import Wants
    wants = Wants("application/json;as=Table;g=meta.k8s.io;v=v1")
    with pytest.raises(ApiError) as e:
        wants.no_table()
    assert (e.value.code, e.value.reason) == (406, "NotAcceptable")
