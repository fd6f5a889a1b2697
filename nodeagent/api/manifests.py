"""Reading Kubernetes objects from files (`--from-file`): YAML (several documents) or JSON, Lists
flattened."""

from __future__ import annotations

import json
from collections.abc import Iterable


def read_objects(paths: Iterable[str], kinds: Iterable[str]) -> list[dict]:
    """Every object of one of `kinds` in the files, in file order."""
    import yaml

    wanted = set(kinds)
    out: list[dict] = []
    for path in paths:
        with open(path) as f:
            text = f.read()
        docs = json.loads(text) if path.endswith(".json") else list(yaml.safe_load_all(text))
        stack = docs if isinstance(docs, list) else [docs]
        while stack:
            obj = stack.pop(0)
            if not obj:
                continue
            kind = obj.get("kind") or ""
            if kind.endswith("List"):
                stack.extend(obj.get("items") or [])
            elif kind in wanted:
                out.append(obj)
    return out
