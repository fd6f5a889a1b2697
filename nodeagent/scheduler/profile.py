"""KubeSchedulerConfiguration-like profiles: which plugins run where, weights, and plugin args.

    percentageOfNodesToScore: 0          # 0 = Kubernetes' adaptive default
    podInitialBackoffSeconds: 1
    podMaxBackoffSeconds: 10
    profiles:
    - schedulerName: default-scheduler
      plugins:
        score:
          disabled: [{name: ImageLocality}]
          enabled: [{name: NodeResourcesFit, weight: 2}]
      pluginConfig:
      - name: NodeResourcesFit
        args: {scoringStrategy: {type: MostAllocated}}

Like kube-scheduler, user settings are merged onto the default multiPoint set: `enabled`
appends (or re-weights), `disabled` removes (`"*"` removes every default at that point).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from nodeagent.scheduler.extender import ExtenderConfig, ignored_resources, parse_extenders
from nodeagent.scheduler.framework.registry import ConfigError, build_args
from nodeagent.scheduler.framework.runtime import POINTS, Framework, PluginSet
from nodeagent.scheduler.plugins import discover

# kube-scheduler's default plugins (multiPoint) and their score weights.
DEFAULT_PLUGINS: list[tuple[str, int]] = [
    ("SchedulingGates", 0),
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("NodeName", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0),
    ("NodeVolumeLimits", 0),
    ("VolumeBinding", 0),
    ("VolumeZone", 0),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DefaultPreemption", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", 0),
]


@dataclasses.dataclass
class Profile:
    scheduler_name: str = "default-scheduler"
    plugins: dict[str, Any] = dataclasses.field(default_factory=dict)
    plugin_config: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    percentage_of_nodes_to_score: int | None = None


@dataclasses.dataclass
class SchedulerConfig:
    percentage_of_nodes_to_score: int = 0
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    pod_max_in_unschedulable_seconds: float = 300.0
    profiles: list[Profile] = dataclasses.field(default_factory=lambda: [Profile()])
    extenders: list[ExtenderConfig] = dataclasses.field(default_factory=list)


def parse_config(doc: dict[str, Any] | None) -> SchedulerConfig:
    doc = doc or {}
    cfg = SchedulerConfig(
        percentage_of_nodes_to_score=int(doc.get("percentageOfNodesToScore") or 0),
        pod_initial_backoff_seconds=float(doc.get("podInitialBackoffSeconds") or 1),
        pod_max_backoff_seconds=float(doc.get("podMaxBackoffSeconds") or 10),
    )
    if not 0 <= cfg.percentage_of_nodes_to_score <= 100:
        raise ConfigError("percentageOfNodesToScore must be in [0, 100]")
    if cfg.pod_max_backoff_seconds < cfg.pod_initial_backoff_seconds:
        raise ConfigError("podMaxBackoffSeconds must be >= podInitialBackoffSeconds")
    profs = doc.get("profiles")
    if profs:
        cfg.profiles = []
        for p in profs:
            pc = {c["name"]: c.get("args") or {} for c in p.get("pluginConfig") or ()}
            cfg.profiles.append(Profile(p.get("schedulerName") or "default-scheduler", p.get("plugins") or {},
                                        pc, p.get("percentageOfNodesToScore")))
    names = [p.scheduler_name for p in cfg.profiles]
    if len(set(names)) != len(names):
        raise ConfigError(f"duplicate schedulerName in profiles: {names}")
    cfg.extenders = parse_extenders(doc.get("extenders"))
    ignored = ignored_resources(cfg.extenders)
    if ignored:  # kube-scheduler hands these to NodeResourcesFit: the extender accounts for them
        for prof in cfg.profiles:
            args = prof.plugin_config.setdefault("NodeResourcesFit", {})
            args["ignoredResources"] = [*(args.get("ignoredResources") or []), *ignored]
    return cfg


DEFAULT_PROFILE_FILE = Path(__file__).with_name("default-profile.yaml")


def load_config(path: str | Path | None) -> SchedulerConfig:
    if path is None:
        return SchedulerConfig()
    return parse_config(yaml.safe_load(Path(path).read_text()))


def _entries(section: Any, key: str) -> list[dict[str, Any]]:
    return list(((section or {}).get(key)) or ())


def plugin_set(profile: Profile) -> PluginSet:
    """Merge the profile's per-point enabled/disabled lists onto the default multiPoint set."""
    mp = profile.plugins.get("multiPoint") or {}
    mp_disabled = {e["name"] for e in _entries(mp, "disabled")}
    base = [] if "*" in mp_disabled else [(n, w) for n, w in DEFAULT_PLUGINS if n not in mp_disabled]
    weights = {n: w for n, w in base if w}
    base_names = [n for n, _ in base]
    for e in _entries(mp, "enabled"):
        if e["name"] not in base_names:
            base_names.append(e["name"])
        if e.get("weight"):
            weights[e["name"]] = int(e["weight"])
    points: dict[str, list[str]] = {}
    for point in POINTS:
        sec = profile.plugins.get(point) or {}
        disabled = {e["name"] for e in _entries(sec, "disabled")}
        names = [] if "*" in disabled else [n for n in base_names if n not in disabled]
        for e in _entries(sec, "enabled"):
            if e["name"] not in names:
                names.append(e["name"])
            if point == "score" and e.get("weight"):
                weights[e["name"]] = int(e["weight"])
        points[point] = names
    for n, w in weights.items():
        if w < 0 or w > 100:
            raise ConfigError(f"{n}: score weight {w} outside [0, 100]")
    return PluginSet(points, weights)


def build_framework(profile: Profile, handle: Any, out_of_tree: dict[str, Any] | None = None) -> Framework:
    """Instantiate the profile's plugins (validated args, one instance each) and wire them.
    `out_of_tree` adds plugin modules (NAME, new, optional Args/validate) beside the in-tree ones."""
    registry = discover()
    for name, mod in (out_of_tree or {}).items():
        if name in registry:
            raise ConfigError(f"out-of-tree plugin {name!r} collides with an in-tree plugin")
        registry[name] = mod
    ps = plugin_set(profile)
    wanted: list[str] = []
    for names in ps.points.values():
        for n in names:
            if n not in wanted:
                wanted.append(n)
    for n in profile.plugin_config:
        if n not in registry:
            raise ConfigError(f"pluginConfig for unknown plugin {n!r}")
    plugins = {}
    for n in wanted:
        mod = registry.get(n)
        if mod is None:
            raise ConfigError(f"unknown plugin {n!r} (known: {', '.join(sorted(registry))})")
        args = build_args(mod, profile.plugin_config.get(n))
        plugins[n] = mod.new(args, handle)
    return Framework(profile.scheduler_name, plugins, ps, handle)
