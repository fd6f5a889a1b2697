"""OpenAPI v3 schemas as the apiserver's decoder sees them: which fields of an object a kind does not have.

kube-apiserver decodes a built-in kind into its Go type with a strict decoder (sigs.k8s.io/json): a field the
type does not declare is an "unknown field" (`spec.containers[0].foo`), case-sensitively. The schemas here are
the upstream OpenAPI documents' `components/schemas`, so the same fields are known as on Kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

REF_PREFIX = "#/components/schemas/"

Schema = Mapping[str, Any]


class Schemas:
    """A document's named schemas, with `$ref` (and kube-openapi's one-element `allOf` wrapper) resolved."""

    def __init__(self, named: Mapping[str, Schema]) -> None:
        self.named = named

    def resolve(self, node: Schema) -> Schema:
        for _ in range(16):  # a chain of references, never a cycle at one node
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith(REF_PREFIX):
                node = self.named.get(ref[len(REF_PREFIX):], {})
                continue
            all_of = node.get("allOf")
            if isinstance(all_of, list) and len(all_of) == 1 and "properties" not in node:
                node = all_of[0]
                continue
            return node
        return node

    def unknown_fields(self, obj: Any, node: Schema, path: str = "") -> list[str]:
        """The paths of the fields in `obj` that `node` does not declare, as the strict decoder names them."""
        out: list[str] = []
        self._walk(obj, self.resolve(node), path, out)
        return out

    def _walk(self, obj: Any, node: Schema, path: str, out: list[str]) -> None:
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return
        if isinstance(obj, dict):
            props = node.get("properties")
            if isinstance(props, dict):
                for k, v in obj.items():
                    child = props.get(k)
                    where = f"{path}.{k}" if path else k
                    if child is None:
                        out.append(where)
                    elif v is not None:
                        self._walk(v, self.resolve(child), where, out)
                return
            extra = node.get("additionalProperties")
            if isinstance(extra, dict):
                values = self.resolve(extra)
                for k, v in obj.items():
                    if v is not None:
                        self._walk(v, values, f"{path}[{k}]", out)
        elif isinstance(obj, list):
            items = node.get("items")
            if isinstance(items, dict):
                element = self.resolve(items)
                for i, v in enumerate(obj):
                    if v is not None:
                        self._walk(v, element, f"{path}[{i}]", out)


def kind_schema(named: Mapping[str, Schema], group: str, version: str, kind: str) -> str | None:
    """The name of the schema that carries `x-kubernetes-group-version-kind` for this kind."""
    for name, s in named.items():
        for gvk in s.get("x-kubernetes-group-version-kind") or ():
            if gvk.get("group", "") == group and gvk.get("version") == version and gvk.get("kind") == kind:
                return name
    return None
