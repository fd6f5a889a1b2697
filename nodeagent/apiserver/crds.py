"""CustomResourceDefinitions the server ships and installs on start: the Gateway API's standard channel
(GatewayClass, Gateway, HTTPRoute, ReferenceGrant) and external-snapshotter's VolumeSnapshot,
VolumeSnapshotContent and VolumeSnapshotClass, as k3s installs its bundled manifests. A definition
already present is kept as it is (a person may have installed another Gateway API release), and one a
person deletes stays deleted until the server restarts.

Their CEL rules are not compiled when they are installed (`schema_cel.shipped_rules`): the tests compile
every one, and the server's start then loads no CEL; each is compiled when an object of its kind is first
written."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import yaml

from nodeagent.api import schema_cel
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.registry import CRDS, Registry
from nodeagent.store import base as store_base

log = logging.getLogger("nodeagent.apiserver.crds")

BUNDLES = {
    Path(__file__).with_name("crds") / "gateway-api-v1.6.1-standard.yaml": (
        "gatewayclasses.gateway.networking.k8s.io", "gateways.gateway.networking.k8s.io",
        "httproutes.gateway.networking.k8s.io", "referencegrants.gateway.networking.k8s.io"),
    # external-snapshotter's CRDs (its client/config/crd at v8.6.0), for the CSI driver's snapshots
    Path(__file__).with_name("crds") / "external-snapshotter-v8.6.0-snapshot.storage.k8s.io.yaml": (
        "volumesnapshotclasses.snapshot.storage.k8s.io", "volumesnapshotcontents.snapshot.storage.k8s.io",
        "volumesnapshots.snapshot.storage.k8s.io"),
}


def _load(path: Path) -> list[dict[str, Any]]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with open(path) as f:
        return [d for d in yaml.load_all(f, Loader=loader) if d]


async def install_bundled(registry: Registry) -> list[str]:
    """Create every bundled definition that is missing; the names created. Never raises: a server runs
    without them (what failed is logged)."""
    try:
        return await _install(registry)
    except Exception:  # a bundle is an extra: never take the apiserver down with it
        log.exception("installing the bundled CustomResourceDefinitions failed; Gateway API is not served")
        return []


async def _install(registry: Registry) -> list[str]:
    made = []
    for path, names in BUNDLES.items():
        missing = []
        for name in names:
            try:
                await registry.store.get(CRDS.key(None, name))
            except store_base.NotFound:
                missing.append(name)
        if not missing:
            continue
        for crd in await asyncio.to_thread(_load, path):
            if crd["metadata"]["name"] not in missing:
                continue
            try:
                with schema_cel.shipped_rules():  # their rules compile (tests): no CEL loaded at start
                    await registry.create(CRDS, None, crd)
                made.append(crd["metadata"]["name"])
            except ApiError as e:
                if e.code != 409:
                    raise
    if made:
        log.info("installed the bundled CustomResourceDefinitions %s", ", ".join(made))
    return made
