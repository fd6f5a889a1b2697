#!/usr/bin/env python3
"""Regenerate nodeagent/apiserver/openapi_builtin.jsonl.gz, the OpenAPI v3 documents of the built-in kinds.

The source is a Kubernetes release's `api/openapi-spec/v3/` directory: one document per group-version
(`api__v1_openapi.json`, `apis__apps__v1_openapi.json`, ...), the documents kube-apiserver serves at
`/openapi/v3/<gv>`. kubectl-validate keeps verbatim copies per release under
`pkg/openapiclient/builtins/<minor>/` in the layout `api/v1.json`, `apis/apps/v1.json`; both layouts are read.

The stable versions (v1, v2, ...) of every group nodeagent serves are kept whole, and written gzip'd as JSON
lines: `{"release": ...}` first, then one `["api/v1", {...}]` per group-version, sorted, so the server decodes
one document at a time (decoding them all at once held ~60 MiB for a moment); the server filters
them when it loads them to what it serves then (nodeagent.apiserver.openapi.filtered: the paths of served
resources and subresources and the schemas those reach), so a resource served later needs no regeneration.

Usage:
    git -C <kubernetes checkout> archive v1.35.0 api/openapi-spec/v3 | tar -x -C /tmp/k8s
    python tools/openapi_builtin.py /tmp/k8s/api/openapi-spec/v3 --release 1.35
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nodeagent.api.resources import RESOURCES

OUT = Path(__file__).resolve().parents[1] / "nodeagent/apiserver/openapi_builtin.jsonl.gz"
STABLE = re.compile(r"^v[0-9]+$")


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


def served_groups() -> set[str]:
    return {r.group for r in RESOURCES}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("source", type=Path, help="a release's api/openapi-spec/v3 directory")
    ap.add_argument("--release", required=True, help="the Kubernetes release it came from, e.g. 1.35")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    docs = read_documents(args.source)
    groups = served_groups()
    out: dict[str, dict[str, Any]] = {}
    for gv, doc in docs.items():
        parts = gv.split("/")
        group = parts[1] if parts[0] == "apis" else ""
        if group in groups and STABLE.match(parts[-1]):
            out[gv] = doc
    for gv in sorted({r.gv_path.lstrip("/") for r in RESOURCES} - set(out)):
        print(f"{gv}: not in {args.source}; nodeagent serves it without an OpenAPI document", file=sys.stderr)
    lines = [json.dumps({"release": args.release}, sort_keys=True, separators=(",", ":"))]
    lines += [json.dumps([gv, out[gv]], sort_keys=True, separators=(",", ":")) for gv in sorted(out)]
    data = ("\n".join(lines) + "\n").encode()
    args.out.write_bytes(gzip.compress(data, 9, mtime=0))
    print(f"{args.out}: {len(out)} group-versions, {len(data)} bytes JSON, "
          f"{args.out.stat().st_size} bytes gzip'd")
    return 0


if __name__ == "__main__":
    sys.exit(main())
