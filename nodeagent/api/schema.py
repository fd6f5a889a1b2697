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


class _Node:
    """A resolved schema reduced to what the unknown-field walk reads."""

    __slots__ = ("props", "items", "values", "open")

    def __init__(self, node: Schema) -> None:
        props, items, values = node.get("properties"), node.get("items"), node.get("additionalProperties")
        self.props: Mapping[str, Schema] | None = props if isinstance(props, dict) else None
        self.items: Schema | None = items if isinstance(items, dict) else None
        self.values: Schema | None = values if isinstance(values, dict) else None
        self.open = bool(node.get("x-kubernetes-preserve-unknown-fields"))


class Schemas:
    """A document's named schemas, with `$ref` (and kube-openapi's one-element `allOf` wrapper) resolved.

    Resolved nodes are kept (by the identity of the schema dict they came from): a Schemas lives as long as
    the document it reads, and every write of a kind walks the same few dozen nodes.
    """

    def __init__(self, named: Mapping[str, Schema]) -> None:
        self.named = named
        self._nodes: dict[int, _Node] = {}

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

    def _node(self, schema: Schema) -> _Node:
        n = self._nodes.get(id(schema))
        if n is None:
            n = self._nodes[id(schema)] = _Node(self.resolve(schema))
        return n

    def unknown_fields(self, obj: Any, node: Schema, path: str = "") -> list[str]:
        """The paths of the fields in `obj` that `node` does not declare, as the strict decoder names them."""
        out: list[str] = []
        self._walk(obj, self._node(node), path, out)
        return out

    def _walk(self, obj: Any, node: _Node, path: str, out: list[str]) -> None:
        if node.open:
            return
        if type(obj) is dict:
            if node.props is not None:
                for k, v in obj.items():
                    child = node.props.get(k)
                    if child is None:
                        out.append(f"{path}.{k}" if path else k)
                    elif type(v) is dict or type(v) is list:
                        self._walk(v, self._node(child), f"{path}.{k}" if path else k, out)
            elif node.values is not None:
                values = self._node(node.values)
                for k, v in obj.items():
                    if type(v) is dict or type(v) is list:
                        self._walk(v, values, f"{path}[{k}]", out)
        elif type(obj) is list and node.items is not None:
            element = self._node(node.items)
            for i, v in enumerate(obj):
                if type(v) is dict or type(v) is list:
                    self._walk(v, element, f"{path}[{i}]", out)


def kind_schema(named: Mapping[str, Schema], group: str, version: str, kind: str) -> str | None:
    """The name of the schema that carries `x-kubernetes-group-version-kind` for this kind."""
    for name, s in named.items():
        for gvk in s.get("x-kubernetes-group-version-kind") or ():
            if gvk.get("group", "") == group and gvk.get("version") == version and gvk.get("kind") == kind:
                return name
    return None
