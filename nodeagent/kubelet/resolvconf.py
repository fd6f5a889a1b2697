"""A pod's resolv.conf by dnsPolicy, as the kubelet writes it. Pure: the host's file comes in as text.

- ClusterFirst: the cluster DNS IPs, search `<ns>.svc.<domain> svc.<domain> <domain>` + the host's
  search, `options ndots:5`; a hostNetwork pod falls back to Default (as the kubelet does);
- ClusterFirstWithHostNet: ClusterFirst even with hostNetwork;
- Default: the host's nameservers, search and options;
- None: nothing but the pod's dnsConfig.
- Without cluster DNS IPs, ClusterFirst falls back to Default (the kubelet warns and does the same).
The pod's `dnsConfig` is merged in every case: its nameservers appended, its searches put first,
its options overriding same-named ones; duplicates dropped. Then Kubernetes' limits: at most 3
nameservers, 32 search domains and 2048 characters of search list (the rest dropped, with a warning).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

MAX_NAMESERVERS = 3
MAX_SEARCH_PATHS = 32
MAX_SEARCH_CHARS = 2048
DEFAULT_OPTIONS = ("ndots:5",)


@dataclasses.dataclass
class ResolvConf:
    nameservers: list[str] = dataclasses.field(default_factory=list)
    searches: list[str] = dataclasses.field(default_factory=list)
    options: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)

    def render(self) -> str:
        lines = [f"nameserver {ns}" for ns in self.nameservers]
        if self.searches:
            lines.append("search " + " ".join(self.searches))
        if self.options:
            lines.append("options " + " ".join(self.options))
        return "\n".join(lines) + "\n" if lines else ""


def parse_resolv_conf(text: str) -> ResolvConf:
    """nameserver lines in order; the last search/domain line; every options line."""
    out = ResolvConf()
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split(";", 1)[0].split()
        if not fields:
            continue
        if fields[0] == "nameserver" and len(fields) > 1:
            out.nameservers.append(fields[1])
        elif fields[0] in ("search", "domain"):
            out.searches = [s.rstrip(".") for s in fields[1:] if s.rstrip(".")]
        elif fields[0] == "options":
            out.options.extend(fields[1:])
    return out


def pod_resolv_conf(pod: Mapping[str, Any], cluster_dns: list[str], cluster_domain: str,
                    host_resolv_conf: str) -> ResolvConf:
    """The resolv.conf the kubelet writes for `pod`."""
    spec = pod.get("spec") or {}
    namespace = (pod.get("metadata") or {}).get("namespace") or "default"
    policy = spec.get("dnsPolicy") or "ClusterFirst"
    host = parse_resolv_conf(host_resolv_conf)
    warnings: list[str] = []
    cluster = policy == "ClusterFirstWithHostNet" or (policy == "ClusterFirst"
                                                      and not spec.get("hostNetwork"))
    if cluster and not cluster_dns:
        warnings.append(f"dnsPolicy {policy} without cluster DNS: falling back to the host's resolv.conf")
        cluster = False
    if policy == "None":
        out = ResolvConf()
    elif cluster:
        search = ([f"{namespace}.svc.{cluster_domain}", f"svc.{cluster_domain}", cluster_domain]
                  if cluster_domain else [])
        out = ResolvConf(list(cluster_dns), _unique(search + host.searches), list(DEFAULT_OPTIONS))
    else:
        out = ResolvConf(host.nameservers, host.searches, host.options)
    cfg = spec.get("dnsConfig") or {}
    out.nameservers = _unique(out.nameservers + list(cfg.get("nameservers") or []))
    out.searches = _unique([s.rstrip(".") for s in cfg.get("searches") or []] + out.searches)
    out.options = merge_options(out.options, cfg.get("options") or [])
    out.warnings = warnings
    _fit_limits(out)
    return out


def merge_options(base: list[str], pod_options: list[Mapping[str, Any]]) -> list[str]:
    """Options by name; the pod's override the base's and keep their place (value-less: name only)."""
    merged: dict[str, str] = {}
    for opt in base:
        name, sep, value = opt.partition(":")
        merged[name] = opt
    for o in pod_options:
        name = o.get("name") or ""
        if name:
            merged[name] = f"{name}:{o['value']}" if o.get("value") not in (None, "") else name
    return list(merged.values())


def _fit_limits(rc: ResolvConf) -> None:
    if len(rc.nameservers) > MAX_NAMESERVERS:
        rc.warnings.append("nameserver limits exceeded: keeping "
                           f"{', '.join(rc.nameservers[:MAX_NAMESERVERS])}")
        rc.nameservers = rc.nameservers[:MAX_NAMESERVERS]
    search = rc.searches
    if len(search) > MAX_SEARCH_PATHS:
        search = search[:MAX_SEARCH_PATHS]
    kept: list[str] = []
    used = 0
    for s in search:
        need = len(s) + (1 if kept else 0)
        if used + need > MAX_SEARCH_CHARS:
            break
        kept.append(s)
        used += need
    if kept != rc.searches:
        rc.warnings.append(f"search line limits exceeded: keeping {' '.join(kept)}")
        rc.searches = kept


def _unique(items: list[str]) -> list[str]:
    return [s for s in dict.fromkeys(i for i in items if i)]
