"""Server-side field validation: the `fieldValidation` query parameter (Ignore, Warn, Strict) on writes.

As kube-apiserver (KEP-2885): a field the kind's schema does not declare is an "unknown field". With Strict
the write is refused with the decoder's words (`strict decoding error: unknown field "spec.foo"`), wrapped
as the create/update/patch handlers wrap it; with Warn (the default) each becomes a `Warning` response header
(`299 - "unknown field \\"spec.foo\\""`), which kubectl prints; with Ignore nothing is said. A custom
resource's unknown fields are the ones its structural schema prunes.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

from nodeagent.api import schema_validation
from nodeagent.api.resources import Resource
from nodeagent.api.schema import DecodeError
from nodeagent.apiserver import errors
from nodeagent.apiserver.openapi import OpenAPI

DIRECTIVES = ("Ignore", "Strict", "Warn")
_OPTIONS_KIND = {"create": "CreateOptions", "update": "UpdateOptions", "patch": "PatchOptions"}
APPLY = "application/apply-patch+yaml"
JSON_PATCH = "application/json-patch+json"


def directive(query: Mapping[str, str], verb: str) -> str:
    """The request's directive; an unknown one is refused as kube-apiserver validates its options."""
    value = query.get("fieldValidation", "")
    if not value:
        return "Warn"
    if value not in DIRECTIVES:
        supported = ", ".join(f'"{d}"' for d in DIRECTIVES)
        raise errors.invalid(_OPTIONS_KIND.get(verb, "CreateOptions"), "",
                             [{"reason": "FieldValueNotSupported", "field": "fieldValidation",
                               "message": f'Unsupported value: "{value}": supported values: {supported}'}],
                             "meta.k8s.io")
    return value


def _without_directives(patch: Any) -> Any:
    """A strategic merge patch without its `$patch`, `$setElementOrder/...` (and like) directive keys."""
    if isinstance(patch, dict):
        return {k: _without_directives(v) for k, v in patch.items() if not k.startswith("$")}
    if isinstance(patch, list):
        return [_without_directives(v) for v in patch]
    return patch


async def unknown_fields(openapi: OpenAPI, res: Resource, body: Any, drop: bool = False,
                         patch: bool = False) -> list[str]:
    """The unknown fields of `body` (a whole object, or a merge-style patch), in the decoder's path form;
    `drop`: remove them from a built-in kind's body, as decoding into its Go type does (a custom object is
    pruned by the registry, against its schema)."""
    if not isinstance(body, dict):
        return []
    if res.schema is not None:
        doc = _without_directives(body) if patch else copy.deepcopy(body)
        return schema_validation.prune(doc, res.schema)
    if openapi.stale():
        await asyncio.to_thread(openapi.schema_for, res)  # the first use loads the shipped documents
    found = openapi.schema_for(res)
    if found is None:
        return []
    schemas, name = found
    return schemas.unknown_fields(body, name, drop, patch)


async def check(openapi: OpenAPI, res: Resource, verb: str, query: Mapping[str, str], body: Any,
                patch_type: str = "") -> list[str]:
    """Warnings to send (Warn), or raise the Strict refusal; unknown fields of a built-in kind are dropped
    from `body` unless the request is refused.

    A value of the wrong JSON type in a created or replaced object is refused whatever the directive, as the
    decoder refuses it; so is an unknown field in a server-side apply, whose typed patch cannot be made."""
    how = directive(query, verb)
    if verb not in _OPTIONS_KIND or patch_type == JSON_PATCH:
        return []  # a JSON patch is a list of operations: its result is checked by validation
    patch = verb == "patch"
    try:
        unknown = await unknown_fields(openapi, res, body, how != "Strict" and patch_type != APPLY, patch)
    except DecodeError as e:
        if patch:
            return []  # the merged object meets validation, which words its own refusal
        raise errors.bad_request(f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
                                 f"{e}") from None
    if not unknown:
        return []
    if patch_type == APPLY:  # the typed patch cannot be made, whatever the directive (fieldmanager)
        raise errors.ApiError(500, "", f"failed to create typed patch object ({res.group}/{res.version}, "
                                       f"Kind={res.kind}): {smd_errors(unknown)}")
    if how == "Ignore":
        return []
    words = [f'unknown field "{p}"' for p in unknown]
    if how == "Warn":
        return words
    decoding = "strict decoding error: " + ", ".join(words)
    if not patch:
        raise errors.bad_request(f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: '
                                 f"{decoding}")
    if patch_type == "application/merge-patch+json":
        raise errors.bad_request(decoding)
    shown = go_quote(go_value(_without_directives(body)))
    raise errors.invalid("", "", [{"reason": "FieldValueInvalid", "field": "patch",
                                   "message": f"Invalid value: {shown}: {decoding}"}])


def smd_errors(unknown: list[str]) -> str:
    """structured-merge-diff's ValidationErrors text: one error plain, several listed under "errors:"."""
    each = [f".{p}: field not declared in schema" for p in unknown]
    return each[0] if len(each) == 1 else "errors:\n  " + "\n  ".join(each)


def go_value(v: Any) -> str:
    """A decoded JSON value as Go's `%+v` prints a map[string]interface{} (keys sorted)."""
    if isinstance(v, dict):
        return "map[" + " ".join(f"{k}:{go_value(v[k])}" for k in sorted(v)) + "]"
    if isinstance(v, list):
        return "[" + " ".join(go_value(x) for x in v) + "]"
    if v is None:
        return "<nil>"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def go_quote(s: str) -> str:
    """Go's %q for a printable string."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def warning_header(text: str) -> str:
    """RFC 7234 warning as kube-apiserver sends it: code 299, agent "-", the text quoted."""
    return '299 - "' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
