"""A tiny synchronous HTTPS caller for raw requests the clients would never send (bad input, auth)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any


def call(server, method: str, path: str, body: bytes | str | dict | None = None, token: str | None = "admin",
         content_type: str = "application/json", headers: dict[str, str] | None = None) -> tuple[int, Any]:
    ctx = ssl.create_default_context(cafile=str(server.ca_file))
    if isinstance(body, dict):
        body = json.dumps(body)
    if isinstance(body, str):
        body = body.encode()
    req = urllib.request.Request(server.url + path, data=body, method=method)
    if body is not None:
        req.add_header("Content-Type", content_type)
    tok = server.token if token == "admin" else token
    if tok:
        req.add_header("Authorization", f"Bearer {tok}")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as r:
            data = r.read()
            code = r.status
    except urllib.error.HTTPError as e:
        data = e.read()
        code = e.code
    try:
        return code, json.loads(data)
    except ValueError:
        return code, data
