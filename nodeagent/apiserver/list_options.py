"""List and watch options as kube-apiserver 1.32 reads them: parsing, WatchList defaults, validation, and
the continue token.

`validate` is apimachinery's ValidateListOptions with the WatchList gate on (its default in 1.32): what
it refuses is a 422 Invalid `ListOptions.meta.k8s.io ""` with the same field paths and messages.
`with_defaults` is SetListOptionsDefaults: a watch from "" or "0" that asks nothing else is a WatchList
(sendInitialEvents=true, resourceVersionMatch=NotOlderThan), so with allowWatchBookmarks it ends its
initial events with the `k8s.io/initial-events-end` bookmark, as on kube.
The continue token is storage.EncodeContinue's: base64url (unpadded) of {"v","rv","start"} where start is
the next key relative to the list's key prefix; rv -1 continues at the latest revision (what an expired
token's replacement carries).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import posixpath
from collections.abc import Mapping

from nodeagent.api.validation import err
from nodeagent.apiserver import errors

EXACT, NOT_OLDER_THAN = "Exact", "NotOlderThan"
TOKEN_VERSION = "meta.k8s.io/v1"
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")
EXPIRED = "The resourceVersion for the provided list is too old."
INCONSISTENT_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the "
    "remainder of the results. Continuing with the provided token results in an inconsistent list - "
    "objects that were created, modified, or deleted between the time the first chunk was returned and "
    "now may show up in the list.")


@dataclasses.dataclass(frozen=True)
class ListOptions:
    resource_version: str = ""  # "" when unset
    match: str = ""  # resourceVersionMatch
    cont: str = ""
    limit: int = 0
    send_initial: bool | None = None
    bookmarks: bool = False
    watch: bool = False

    @property
    def watch_list(self) -> bool:
        """A WatchList request (handlers' isListWatchRequest): initial events, then the end bookmark."""
        return bool(self.send_initial) and self.bookmarks


def _bool(q: Mapping[str, str], name: str) -> bool | None:
    v = q.get(name)
    if v is None or v == "":
        return None
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise errors.bad_request(f'strconv.ParseBool: parsing "{v}": invalid syntax')


def parse(q: Mapping[str, str], watch: bool) -> ListOptions:
    """The options of a list (watch=False) or watch request; 400 BadRequest for values that do not parse."""
    try:
        limit = max(0, int(q.get("limit") or 0))  # kube pages only for a limit above 0
    except ValueError:
        raise errors.bad_request("limit must be an integer") from None
    return ListOptions(resource_version=q.get("resourceVersion") or "",
                       match=q.get("resourceVersionMatch") or "", cont=q.get("continue") or "", limit=limit,
                       send_initial=_bool(q, "sendInitialEvents"),
                       bookmarks=bool(_bool(q, "allowWatchBookmarks")), watch=watch)


def with_defaults(o: ListOptions) -> ListOptions:
    """SetListOptionsDefaults with the WatchList gate on."""
    if not o.watch or o.send_initial is not None or o.match:
        return o
    if o.resource_version in ("", "0"):
        return dataclasses.replace(o, send_initial=True, match=NOT_OLDER_THAN)
    return o


def _forbidden(field: str, detail: str) -> dict[str, str]:
    return err("FieldValueForbidden", field, f"Forbidden: {detail}")


def _unsupported(field: str, value: str, supported: tuple[str, ...]) -> dict[str, str]:
    quoted = ", ".join(f'"{s}"' for s in supported)
    return err("FieldValueNotSupported", field, f'Unsupported value: "{value}": supported values: {quoted}')


def validate(o: ListOptions) -> None:
    """ValidateListOptions (WatchList on); 422 Invalid with every error found."""
    errs = _validate_watch(o) if o.watch else _validate_list(o)
    if errs:
        raise errors.invalid("ListOptions", "", errs, "meta.k8s.io")


def _validate_list(o: ListOptions) -> list[dict[str, str]]:
    errs = []
    if o.match:
        if not o.resource_version:
            errs.append(_forbidden("resourceVersionMatch",
                                   "resourceVersionMatch is forbidden unless resourceVersion is provided"))
        if o.cont:
            errs.append(_forbidden("resourceVersionMatch",
                                   "resourceVersionMatch is forbidden when continue is provided"))
        if o.match not in (EXACT, NOT_OLDER_THAN):
            errs.append(_unsupported("resourceVersionMatch", o.match, (EXACT, NOT_OLDER_THAN, "")))
        if o.match == EXACT and o.resource_version == "0":
            errs.append(_forbidden("resourceVersionMatch",
                                   'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'))
    if o.send_initial is not None:
        errs.append(_forbidden("sendInitialEvents", "sendInitialEvents is forbidden for list"))
    return errs


def _validate_watch(o: ListOptions) -> list[dict[str, str]]:
    errs = []
    if o.send_initial is not None and o.match != NOT_OLDER_THAN:
        errs.append(_forbidden("resourceVersionMatch", "sendInitialEvents requires setting "
                                                       f"resourceVersionMatch to {NOT_OLDER_THAN}"))
    if o.match:
        if o.send_initial is None:
            errs.append(_forbidden("resourceVersionMatch",
                                   "resourceVersionMatch is forbidden for watch unless sendInitialEvents is "
                                   "provided"))
        if o.match != NOT_OLDER_THAN:
            errs.append(_unsupported("resourceVersionMatch", o.match, (NOT_OLDER_THAN,)))
        if o.cont:
            errs.append(_forbidden("resourceVersionMatch",
                                   "resourceVersionMatch is forbidden when continue is provided"))
    return errs


def parse_rv(rv: str) -> int:
    """A resourceVersion's revision (0 for "" or "0"); 400 BadRequest when it is not a number."""
    if not rv or rv == "0":
        return 0
    try:
        n = int(rv)
    except ValueError:
        n = -1
    if n < 0:
        raise errors.bad_request(f"invalid resource version: {rv}")
    return n


# ---------------------------------------------------------------- continue tokens
def encode_continue(next_key: str, key_prefix: str, revision: int) -> str:
    """storage.EncodeContinue: `next_key` (the first key of the next page or just before it) relative to
    `key_prefix`."""
    if not next_key.startswith(key_prefix):
        raise ValueError(f"{next_key!r} is not under {key_prefix!r}")
    body = json.dumps({"v": TOKEN_VERSION, "rv": revision, "start": next_key[len(key_prefix):]},
                      separators=(",", ":"))
    return base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


def next_page(last_key: str, key_prefix: str, revision: int) -> str:
    """The token for the page after `last_key` (kube's lastKey + "\\x00": the next key after it)."""
    return encode_continue(last_key + "\x00", key_prefix, revision)


def decode_continue(token: str, key_prefix: str) -> tuple[str, int]:
    """storage.DecodeContinue -> (the full key to start from, revision; -1: the latest);
    400 BadRequest "invalid continue token: ..." as the etcd3 store answers a bad one."""
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        if not isinstance(data, dict):
            raise ValueError(data)
    except Exception as e:
        raise errors.bad_request(f"invalid continue token: continue key is not valid: {e}") from None
    if data.get("v") != TOKEN_VERSION:
        raise errors.bad_request("invalid continue token: continue key is not valid: server does not "
                                 f"recognize this encoded version {data.get('v')}")
    rv, start = data.get("rv"), data.get("start")
    if not isinstance(rv, int) or rv == 0:
        raise errors.bad_request("invalid continue token: continue key is not valid: incorrect encoded start "
                                 "resourceVersion (version meta.k8s.io/v1)")
    if not isinstance(start, str) or not start:
        raise errors.bad_request("invalid continue token: continue key is not valid: encoded start key empty "
                                 "(version meta.k8s.io/v1)")
    key = start if start.startswith("/") else "/" + start
    if posixpath.normpath(key) != key or key.startswith("//"):  # Go's path.Clean: no way above the prefix
        raise errors.bad_request(f"invalid continue token: continue key is not valid: {start}")
    return key_prefix + key[1:], rv


def expired_continue(start_key: str, key_prefix: str) -> errors.ApiError:
    """410 Expired for a continue whose revision was compacted, carrying a token that continues at the
    latest revision (etcd3's handleCompactedErrorForPaging)."""
    e = errors.gone(INCONSISTENT_CONTINUE)
    e.list_meta = {"continue": encode_continue(start_key, key_prefix, -1)}
    return e
