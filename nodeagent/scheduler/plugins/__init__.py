"""In-tree plugins, one subpackage each (NAME, Args, validate, new): adding a plugin = adding a package."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def discover() -> dict[str, ModuleType]:
    """Every in-tree plugin by NAME (kube-scheduler's NewInTreeRegistry)."""
    out = {}
    for m in pkgutil.iter_modules(__path__):
        mod = importlib.import_module(f"{__name__}.{m.name}")
        if hasattr(mod, "NAME") and hasattr(mod, "new"):
            out[mod.NAME] = mod
    return out
