"""Moving objects stored under nodeagent's former keys (`/registry/<group or core>/<resource>/...`) to
kube-apiserver's layout (`/registry/pods/...`, `/registry/minions/...`, `/registry/services/specs/...`),
once, when the apiserver starts on a store written by an older nodeagent.

Each object is created at its new key before its old key is deleted, so a kill at any point leaves every
object readable at one key or both; the next start finishes the move (an object already at its new key
wins, the old copy is dropped). Objects get new resourceVersions, as after an etcd restore: clients
re-list.
"""

from __future__ import annotations

import logging

from nodeagent.api.resources import legacy_key_prefix, stored_resources
from nodeagent.store import base as store_base

log = logging.getLogger("nodeagent.apiserver.key_layout")


async def migrate_legacy_keys(store: store_base.Store) -> int:
    """Move every built-in object from its former key to kube-apiserver's; the number moved."""
    moved = 0
    for res in stored_resources():
        old_prefix = legacy_key_prefix(res)
        if old_prefix == res.storage_prefix:
            continue
        items, _ = await store.list(old_prefix)
        for obj in items:
            meta = obj.get("metadata") or {}
            name, ns = meta.get("name", ""), meta.get("namespace")
            old_key = f"{old_prefix}{ns}/{name}" if res.namespaced else f"{old_prefix}{name}"
            clean = dict(obj, metadata={k: v for k, v in meta.items() if k != "resourceVersion"})
            try:
                await store.create(res.key(ns, name), clean)
            except store_base.AlreadyExists:
                pass  # a move cut short before the delete: the copy at the new key is the one kept
            try:
                await store.delete(old_key)
            except store_base.NotFound:
                pass
            moved += 1
    if moved:
        log.info("store: moved %d objects to kube-apiserver's key layout (/registry/<resource>/...)", moved)
    return moved
