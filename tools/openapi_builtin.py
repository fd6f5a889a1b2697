#!/usr/bin/env python3
"""Regenerate nodeagent/apiserver/openapi_builtin.json.gz, the OpenAPI v3 documents of the built-in kinds.

The source is a Kubernetes release's `api/openapi-spec/v3/` directory: one document per group-version
(`api__v1_openapi.json`, `apis__apps__v1_openapi.json`, ...), the documents kube-apiserver serves at
`/openapi/v3/<gv>`. kubectl-validate keeps verbatim copies per release under
`pkg/openapiclient/builtins/<minor>/` in the layout `api/v1.json`, `apis/apps/v1.json`; both layouts are read.

Each document is filtered to what nodeagent serves (nodeagent.api.resources: the group-versions, the paths of
served resources and subresources, and the schemas those reach), then all are written as one gzip'd JSON
object `{"release": ..., "documents": {"api/v1": {...}, "apis/apps/v1": {...}}}`.

Usage:
    git -C <kubernetes checkout> archive v1.35.0 api/openapi-spec/v3 | tar -x -C /tmp/k8s
    python tools/openapi_builtin.py /tmp/k8s/api/openapi-spec/v3 --release 1.35
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nodeagent.api.resources import RESOURCES, Resource

OUT = Path(__file__).resolve().parents[1] / "nodeagent/apiserver/openapi_builtin.json.gz"
REF = "#/components/schemas/"


def read_documents(src: Path) -> dict[str, dict[str, Any]]:
    """{"api/v1": doc, "apis/apps/v1": doc} from either layout."""
    out: dict[str, dict[str, Any]] = {}
    for f in sorted(src.rglob("*.json")):
        rel = f.relative_to(src).as_posix()
        if rel.endswith("_openapi.json"):  # kubernetes: apis__apps__v1_openapi.json
            gv = rel.removesuffix("_openapi.json").replace("__", "/")
        else:  # kubectl-validate: apis/apps/v1.json
            gv = rel.removesuffix(".json")
        if gv.startswith(("api/", "apis/")) and gv.count("/") in (1, 2):
            out[gv] = json.loads(f.read_text())
    return out


def served_by_gv() -> dict[str, list[Resource]]:
    out: dict[str, list[Resource]] = {}
    for r in RESOURCES:
        out.setdefault(r.gv_path.lstrip("/"), []).append(r)
    return out


def path_is_served(path: str, gv: str, resources: list[Resource]) -> bool:
    """A path of a served resource (or a served subresource of it), or the group-version's root."""
    rest = path.removeprefix("/" + gv).strip("/").split("/")
    if rest == [""]:
        return True
    if rest[0] == "watch":
        rest = rest[1:]
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[1] == "{namespace}":
        rest = rest[2:]
    r = next((r for r in resources if r.name == rest[0]), None)
    if r is None:
        return False
    sub = rest[2] if len(rest) >= 3 else ""
    return not sub or sub in r.subresources


def refs(node: Any, out: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(REF):
            out.add(ref[len(REF):])
        for v in node.values():
            refs(v, out)
    elif isinstance(node, list):
        for v in node:
            refs(v, out)


def filtered(doc: dict[str, Any], gv: str, resources: list[Resource]) -> dict[str, Any]:
    paths = {p: item for p, item in doc.get("paths", {}).items() if path_is_served(p, gv, resources)}
    schemas = doc.get("components", {}).get("schemas", {})
    want: set[str] = set()
    refs(paths, want)
    kinds = {(r.group, r.version, r.kind) for r in resources}
    for name, s in schemas.items():
        for gvk in s.get("x-kubernetes-group-version-kind", []):
            if (gvk.get("group", ""), gvk.get("version"), gvk.get("kind")) in kinds:
                want.add(name)
    keep: set[str] = set()
    while want:
        name = want.pop()
        if name in keep or name not in schemas:
            continue
        keep.add(name)
        refs(schemas[name], want)
    components = dict(doc.get("components", {}))
    components["schemas"] = {k: schemas[k] for k in sorted(keep)}
    return {**doc, "paths": paths, "components": components}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path, help="a release's api/openapi-spec/v3 directory")
    ap.add_argument("--release", required=True, help="the Kubernetes release it came from, e.g. 1.35")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    docs = read_documents(args.source)
    out: dict[str, dict[str, Any]] = {}
    for gv, resources in served_by_gv().items():
        if gv not in docs:
            print(f"{gv}: not in {args.source}; nodeagent serves it without an OpenAPI document",
                  file=sys.stderr)
            continue
        out[gv] = filtered(docs[gv], gv, resources)
    data = json.dumps({"release": args.release, "documents": out}, sort_keys=True,
                      separators=(",", ":")).encode()
    args.out.write_bytes(gzip.compress(data, 9, mtime=0))
    print(f"{args.out}: {len(out)} group-versions, {len(data)} bytes JSON, "
          f"{args.out.stat().st_size} bytes gzip'd")
    return 0


if __name__ == "__main__":
    sys.exit(main())
