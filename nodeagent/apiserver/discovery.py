"""Discovery documents: /version, /api, /apis and the per-group-version resource lists."""

from __future__ import annotations

import platform
import sys
from typing import Any

from nodeagent.api.resources import SUBRESOURCE_KINDS, group_versions, resources_in

# The Kubernetes API level this server speaks (kubectl warns on skew beyond +-1 minor; it still works).
KUBE_MAJOR, KUBE_MINOR = "1", "30"


def version_info() -> dict[str, str]:
    from nodeagent import __version__ as ours

    return {"major": KUBE_MAJOR, "minor": KUBE_MINOR,
            "gitVersion": f"v{KUBE_MAJOR}.{KUBE_MINOR}.0+nodeagent-{ours}",
            "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z",
            "goVersion": f"python{sys.version_info.major}.{sys.version_info.minor}", "compiler": "cpython",
            "platform": f"linux/{_arch()}"}


def _arch() -> str:
    m = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(m, m)


def api_versions(address: str) -> dict[str, Any]:
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}]}


def api_group_list() -> dict[str, Any]:
    groups = []
    for group, versions in group_versions().items():
        if not group:
            continue
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        groups.append({"name": group, "versions": gvs, "preferredVersion": gvs[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(group: str) -> dict[str, Any] | None:
    for g in api_group_list()["groups"]:
        if g["name"] == group:
            return {"kind": "APIGroup", "apiVersion": "v1", **g}
    return None


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    rs = resources_in(group, version)
    if not rs:
        return None
    out: list[dict[str, Any]] = []
    for r in rs:
        entry: dict[str, Any] = {"name": r.name, "singularName": r.singular, "namespaced": r.namespaced,
                                 "kind": r.kind, "verbs": list(r.verbs)}
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        out.append(entry)
        for sub in r.subresources:
            sg, sv, skind, verbs = SUBRESOURCE_KINDS[sub]
            e: dict[str, Any] = {"name": f"{r.name}/{sub}", "singularName": "", "namespaced": r.namespaced,
                                 "kind": skind or r.kind, "verbs": list(verbs)}
            if sg:
                e["group"], e["version"] = sg, sv
            out.append(e)
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": out}


AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
AGGREGATED_V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"


def wants_aggregated(accept: str) -> str | None:
    """The aggregated-discovery media type the client asked for first (kubectl >= 1.27), if any."""
    for part in accept.split(","):
        p = part.replace(" ", "")
        if "as=APIGroupDiscoveryList" in p and "g=apidiscovery.k8s.io" in p:
            return AGGREGATED_V2 if "v=v2;" in p + ";" and "v=v2beta1" not in p else AGGREGATED_V2BETA1
        if p.startswith("application/json") and "as=" not in p:
            return None
    return None


def aggregated(core: bool, media: str) -> dict[str, Any]:
    """/api or /apis as one APIGroupDiscoveryList: every group, version and resource in one answer."""
    items = []
    for group, versions in group_versions().items():
        if (group == "") != core:
            continue
        vs = []
        for v in versions:
            resources = []
            for r in resources_in(group, v):
                entry: dict[str, Any] = {
                    "resource": r.name,
                    "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
                    "scope": "Namespaced" if r.namespaced else "Cluster", "singularResource": r.singular,
                    "verbs": list(r.verbs)}
                if r.short_names:
                    entry["shortNames"] = list(r.short_names)
                if r.categories:
                    entry["categories"] = list(r.categories)
                subs = []
                for sub in r.subresources:
                    sg, sv, skind, verbs = SUBRESOURCE_KINDS[sub]
                    subs.append({"subresource": sub, "verbs": list(verbs),
                                 "responseKind": {"group": sg if sg is not None else r.group,
                                                  "version": sv or r.version, "kind": skind or r.kind}})
                if subs:
                    entry["subresources"] = subs
                resources.append(entry)
            vs.append({"version": v, "resources": resources, "freshness": "Current"})
        items.append({"metadata": {"name": group, "creationTimestamp": None}, "versions": vs})
    api_version = "apidiscovery.k8s.io/v2" if media == AGGREGATED_V2 else "apidiscovery.k8s.io/v2beta1"
    return {"kind": "APIGroupDiscoveryList", "apiVersion": api_version, "metadata": {}, "items": items}
