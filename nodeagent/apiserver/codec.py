"""JSON/YAML encoding for the wire; orjson on the hot path when installed (measured faster), stdlib
otherwise."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

JSON = "application/json"

try:
    import orjson

    def dumps(obj: Any) -> bytes:
        return orjson.dumps(obj)

    def loads(data: bytes | str) -> Any:
        return orjson.loads(data)

    DecodeError: type[Exception] = orjson.JSONDecodeError
except ImportError:  # pragma: no cover - orjson is a declared dependency
    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    def loads(data: bytes | str) -> Any:
        return json.loads(data)

    DecodeError = json.JSONDecodeError


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=dumps(obj), status=status, content_type=JSON)


def load_yaml(data: bytes) -> Any:
    import yaml

    return yaml.safe_load(data)
