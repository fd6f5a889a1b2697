"""A Kubernetes object as every part of nodeagent holds it: decoded JSON with Kubernetes' own field names
(apiVersion, kind, metadata, spec, status), unknown fields kept. The same alias serves any JSON object
inside one (a container, a condition); a function that only reads one may take `Mapping[str, Any]`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias, TypeVar

Obj: TypeAlias = dict[str, Any]

ObjT = TypeVar("ObjT", bound=Mapping[str, Any])
"""The caller's own object type, for a function that hands back (some of) the objects it was given."""
