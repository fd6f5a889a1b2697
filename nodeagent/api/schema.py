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


_GO_SCALARS = {("integer", "int32"): "int32", ("integer", "int64"): "int64", ("integer", ""): "int64",
               ("number", "double"): "float64", ("number", ""): "float64", ("boolean", ""): "bool",
               ("string", ""): "string", ("string", "byte"): "[]uint8"}


class _Node:
    """A resolved schema reduced to what the decoder's walk reads: declared fields, element and value
    schemas, the JSON type it takes (None: a type with its own decoding, e.g. Time, Quantity, IntOrString,
    RawExtension) and the Go type name the decoder would report."""

    __slots__ = ("props", "items", "values", "open", "json", "go", "struct")

    def __init__(self, node: Schema, ref: str) -> None:
        props, items, values = node.get("properties"), node.get("items"), node.get("additionalProperties")
        self.props: Mapping[str, Schema] | None = props if isinstance(props, dict) else None
        self.items: Schema | None = items if isinstance(items, dict) else None
        self.values: Schema | None = values if isinstance(values, dict) else None
        self.open = bool(node.get("x-kubernetes-preserve-unknown-fields"))
        t = node.get("type")
        self.struct = ref.rsplit(".", 1)[-1]  # the Go struct's name, for "Go struct field PodSpec.spec.x"
        self.json: str | None = t if isinstance(t, str) and t and not self.open else None
        self.go = ""
        if self.json == "object" and self.props is not None and ref:
            self.go = ".".join(ref.rsplit(".", 2)[-2:])  # io.k8s.api.core.v1.PodSpec -> v1.PodSpec
        elif self.json in ("integer", "number", "boolean", "string"):
            scalar = _GO_SCALARS.get((self.json, str(node.get("format") or "")))
            if scalar is None or ref:  # a named scalar (Time, Quantity...) decodes itself
                self.json = None
            else:
                self.go = scalar


class DecodeError(ValueError):
    """A value of the wrong JSON type for its field, worded as Go's encoding/json reports the first one."""


class Schemas:
    """A document's named schemas, with `$ref` (and kube-openapi's one-element `allOf` wrapper) resolved.

    Resolved nodes are kept (by the identity of the schema dict they came from): a Schemas lives as long as
    the document it reads, and every write of a kind walks the same few dozen nodes.
    """

    def __init__(self, named: Mapping[str, Schema]) -> None:
        self.named = named
        self._nodes: dict[int, _Node] = {}
        self._drop = self._patch = False

    def _ref(self, node: Schema) -> str:
        ref = node.get("$ref")
        all_of = node.get("allOf")
        if not isinstance(ref, str) and isinstance(all_of, list) and len(all_of) == 1:
            ref = all_of[0].get("$ref")
        return ref[len(REF_PREFIX):] if isinstance(ref, str) and ref.startswith(REF_PREFIX) else ""

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

    def _node(self, schema: Schema, ref: str | None = None) -> _Node:
        n = self._nodes.get(id(schema))
        if n is None:
            name = self._ref(schema) if ref is None else ref
            n = self._nodes[id(schema)] = _Node(self.resolve(schema), name)
        return n

    def unknown_fields(self, obj: Any, name: str, drop: bool = False, patch: bool = False) -> list[str]:
        """The paths of the fields in `obj` that the schema called `name` does not declare, as the strict
        decoder names them; DecodeError for the first value of the wrong JSON type, as Go's decoder says.

        `drop`: remove them too, as decoding into the Go type does. `patch`: `obj` is a merge-style patch,
        whose `$patch`, `$setElementOrder/...` (and like) directive keys are not fields."""
        out: list[str] = []
        self._drop, self._patch = drop, patch
        self._walk(obj, self._node(self.named[name], name), "", "", "", out)
        return out

    def _walk(self, obj: Any, node: _Node, path: str, gopath: str, owner: str, out: list[str]) -> None:
        """`path` names fields as the strict decoder does (`spec.containers[0].foo`), `gopath` as Go's type
        errors do (struct fields only: `spec.containers.foo`); `owner`: the struct whose field this is."""
        if node.open:
            return
        if type(obj) is dict:
            if node.props is not None:
                for k, v in list(obj.items()) if self._drop else obj.items():
                    child = node.props.get(k)
                    where = f"{path}.{k}" if path else k
                    if child is None:
                        if self._patch and (k.startswith("$") or v is None):
                            continue  # a directive, or the deletion of a field the kind does not have
                        out.append(where)
                        if self._drop:
                            del obj[k]
                    elif v is not None:
                        c = self._node(child)
                        gowhere = f"{gopath}.{k}" if gopath else k
                        self._expect(v, c, node.struct, gowhere)
                        if type(v) is dict or type(v) is list:
                            self._walk(v, c, where, gowhere, node.struct, out)
            elif node.values is not None:
                values = self._node(node.values)
                for k, v in obj.items():
                    if v is not None:
                        self._expect(v, values, owner, gopath)
                        if type(v) is dict or type(v) is list:
                            self._walk(v, values, f"{path}[{k}]", gopath, owner, out)
        elif type(obj) is list and node.items is not None:
            element = self._node(node.items)
            for i, v in enumerate(obj):
                if v is not None:
                    self._expect(v, element, owner, gopath)
                    if type(v) is dict or type(v) is list:
                        self._walk(v, element, f"{path}[{i}]", gopath, owner, out)

    def _go(self, node: _Node) -> str:
        if node.go:
            return node.go
        if node.json == "array" and node.items is not None:
            return "[]" + self._go(self._node(node.items))
        if node.json == "object" and node.values is not None:
            return "map[string]" + self._go(self._node(node.values))
        return "interface {}"

    def _expect(self, v: Any, node: _Node, struct: str, gopath: str) -> None:
        if node.json is None:
            return
        got = _JSON_OF.get(type(v), "")
        fraction = node.json == "integer" and type(v) is float and not v.is_integer()
        if got == _TAKES[node.json] and not fraction:
            return
        what = f"number {v}" if got == "number" and node.json == "integer" else got
        raise DecodeError(f"json: cannot unmarshal {what} into Go struct field {struct}.{gopath} "
                          f"of type {self._go(node)}")


_JSON_OF = {dict: "object", list: "array", str: "string", bool: "bool", int: "number", float: "number"}
_TAKES = {"object": "object", "array": "array", "string": "string", "boolean": "bool", "integer": "number",
          "number": "number"}


def kind_schema(named: Mapping[str, Schema], group: str, version: str, kind: str) -> str | None:
    """The name of the schema that carries `x-kubernetes-group-version-kind` for this kind."""
    for name, s in named.items():
        for gvk in s.get("x-kubernetes-group-version-kind") or ():
            if gvk.get("group", "") == group and gvk.get("version") == version and gvk.get("kind") == kind:
                return name
    return None
