"""The garbage collector across built-in kinds outside its fixed informers (ServiceAccounts, Leases), as
kube's watches every deletable resource discovery lists: in all three propagation policies, against a real
apiserver and the in-process controllers."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from tests.harness.waiting import eventually
from tests.integration.controllers.test_gc_custom_kinds import HOLD, gone, ref_to

pytestmark = pytest.mark.slow

OWNERS = {
    "serviceaccount": ("serviceaccounts", "v1", "ServiceAccount", {}),
    "lease": ("leases", "coordination.k8s.io/v1", "Lease", {"spec": {"holderIdentity": "someone"}}),
}


async def owned_configmap(client, ns: str, kind: str, finalizers: list[str] | None = None) -> str:
    """An owner of `kind` named "owner" and a ConfigMap "dep" it owns; the owner's resource."""
    res, api_version, k, extra = OWNERS[kind]
    owner = await client.create(res, {"apiVersion": api_version, "kind": k, "metadata": {"name": "owner"},
                                      **extra}, ns)
    meta = {"name": "dep", "ownerReferences": [ref_to(owner, api_version, k)]}
    if finalizers:
        meta["finalizers"] = finalizers
    await client.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}, ns)
    return res


@pytest.mark.parametrize("kind", list(OWNERS))
async def test_background_deletes_the_dependent(cluster, kind):
    client, ns = cluster
    res = await owned_configmap(client, ns, kind)
    await client.delete(res, "owner", ns, propagation="Background")
    await eventually(lambda: gone(client, "configmaps", "dep", ns))


@pytest.mark.parametrize("kind", list(OWNERS))
async def test_orphan_removes_the_reference_and_keeps_the_dependent(cluster, kind):
    client, ns = cluster
    res = await owned_configmap(client, ns, kind)
    await client.delete(res, "owner", ns, propagation="Orphan")

    async def orphaned():
        if not await gone(client, res, "owner", ns):
            return False
        return not (await client.get("configmaps", "dep", ns))["metadata"].get("ownerReferences")
    await eventually(orphaned)


@pytest.mark.parametrize("kind", list(OWNERS))
async def test_foreground_holds_the_owner_until_the_dependent_is_gone(cluster, kind):
    client, ns = cluster
    res = await owned_configmap(client, ns, kind, [HOLD])
    await client.delete(res, "owner", ns, propagation="Foreground")

    async def dependent_terminating():
        return (await client.get("configmaps", "dep", ns))["metadata"].get("deletionTimestamp")
    await eventually(dependent_terminating)
    held = (await client.get(res, "owner", ns))["metadata"]
    assert held.get("deletionTimestamp") and "foregroundDeletion" in held["finalizers"]
    await client.patch("configmaps", "dep", {"metadata": {"finalizers": None}}, ns)
    await eventually(lambda: gone(client, "configmaps", "dep", ns))
    await eventually(lambda: gone(client, res, "owner", ns))


def process_informer(resource: str, metadata_only: bool):
    """This process's running informer of every `resource` object (whole or metadata-only), or None."""
    from nodeagent.client import informer
    res = informer.resolve(resource)
    inf = informer._SHARED.get((None, res.gv_path, res.name, None, None, None, metadata_only))
    return inf if inf is not None and inf._runners > 0 else None


async def test_metadata_informers_where_no_one_watches_whole_objects(cluster, monkeypatch):
    """As kube's collector, ObjectMeta alone of a kind no other component watches (ConfigMaps, PodTemplates
    here), the other components' informer where one does (pods: one cache, no metadata copy); a kind whose
    informer of whole objects starts later is read from it at the next discovery sync, and collection goes
    on through it."""
    from nodeagent.client.informer import shared
    from nodeagent.controllers import gc_controller

    client, ns = cluster

    async def metadata_of(resource: str):
        return process_informer(resource, True)
    cms = await eventually(lambda: metadata_of("configmaps"))
    await cms.synced.wait()
    assert cms.list() and all(set(o) == {"kind", "apiVersion", "metadata"} for o in cms.list())
    assert process_informer("pods", False) is not None and process_informer("pods", True) is None
    await eventually(lambda: metadata_of("podtemplates"))

    monkeypatch.setattr(gc_controller, "DISCOVERY_PERIOD", 0.5)
    whole = shared(client, "podtemplates")
    task = asyncio.create_task(whole.run())
    try:
        await whole.wait_synced()
        # the discovery loop waits out its old (30 s) period once: a CRD written wakes it
        crd: dict[str, Any] = {
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"wakes.{ns}.example.com"},
            "spec": {"group": f"{ns}.example.com", "scope": "Namespaced",
                     "names": {"plural": "wakes", "singular": "wake", "kind": "Wake"},
                     "versions": [{"name": "v1", "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object"}}}]}}
        await client.create("customresourcedefinitions", crd)

        async def metadata_dropped():
            return process_informer("podtemplates", True) is None
        await eventually(metadata_dropped)
        owner = await client.create("podtemplates", {"apiVersion": "v1", "kind": "PodTemplate",
                                                     "metadata": {"name": "owner"},
                                                     "template": {"spec": {"containers": [
                                                         {"name": "c", "image": "a:1"}]}}}, ns)
        await client.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "dep", "ownerReferences": [ref_to(owner, "v1", "PodTemplate")]}}, ns)
        await client.delete("podtemplates", "owner", ns, propagation="Background")
        await eventually(lambda: gone(client, "configmaps", "dep", ns))
        await client.delete("customresourcedefinitions", crd["metadata"]["name"])
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
