"""A plugin's args from a profile's pluginConfig.

A plugin module exposes NAME, Args (a dataclass with defaults), validate(args) -> list of
error strings, and new(args, handle) -> the plugin object; the in-tree ones are found by
`nodeagent.scheduler.plugins.discover` (kube-scheduler's in-tree registry lives with its plugins too).
"""

from __future__ import annotations

import dataclasses
import re
from types import ModuleType
from typing import Any

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def snake(name: str) -> str:
    return _CAMEL.sub("_", name).lower()


class ConfigError(ValueError):
    """A profile that names an unknown plugin or gives invalid args."""


def build_args(mod: ModuleType, raw: dict[str, Any] | None) -> Any:
    """The plugin's Args from pluginConfig (camelCase keys, as in KubeSchedulerConfiguration)."""
    cls = getattr(mod, "Args", None)
    if cls is None:
        if raw:
            raise ConfigError(f"{mod.NAME}: takes no args")
        return None
    fields = {f.name for f in dataclasses.fields(cls)}
    kw = {}
    for k, v in (raw or {}).items():
        if k in ("apiVersion", "kind"):
            continue
        sk = snake(k)
        if sk not in fields:
            raise ConfigError(f"{mod.NAME}: unknown arg {k!r}")
        kw[sk] = v
    args = cls(**kw)
    errs = mod.validate(args) if hasattr(mod, "validate") else []
    if errs:
        raise ConfigError(f"{mod.NAME}: " + "; ".join(errs))
    return args
