"""The garbage collector across custom kinds, as kube's builds its graph from every deletable resource
discovery lists: a CRD's objects own and are owned, in all three propagation policies, against a real
apiserver and the in-process controllers."""

from __future__ import annotations

import pytest

from nodeagent.api.resources import Resource
from nodeagent.client.rest import ClientError
from tests.harness.waiting import eventually

pytestmark = pytest.mark.slow

HOLD = "example.com/hold"  # a finalizer of the test's: keeps a dependent terminating while it looks


@pytest.fixture
async def gizmos(cluster):
    """A namespaced custom resource of the test's own (its group named after the namespace), served."""
    client, ns = cluster
    group = f"{ns}.example.com"
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    await client.create("customresourcedefinitions", {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"gizmos.{group}"},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema}]}})
    res = Resource(group, "v1", "gizmos", "Gizmo", True)

    async def served():
        try:
            return (await client.list(res, ns)) is not None
        except ClientError:
            return False
    await eventually(served)
    try:
        yield client, ns, res
    finally:
        await client.delete("customresourcedefinitions", f"gizmos.{group}")


def ref_to(obj: dict, api_version: str, kind: str) -> dict:
    return {"apiVersion": api_version, "kind": kind, "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


async def gone(client, res, name: str, ns: str) -> bool:
    try:
        await client.get(res, name, ns)
        return False
    except ClientError as e:
        if not e.not_found:
            raise
        return True


async def owner_and_dependent(client, ns: str, res: Resource, custom_owns: bool,
                              finalizers: list[str] | None = None) -> tuple[tuple, tuple]:
    """(owner's resource, name), (dependent's resource, name): a Gizmo owning a ConfigMap, or a Deployment
    (of no replicas) owning a Gizmo."""
    if custom_owns:
        owner = await client.create(res, {"apiVersion": res.api_version, "kind": "Gizmo",
                                          "metadata": {"name": "owner"}}, ns)
        meta = {"name": "dep", "ownerReferences": [ref_to(owner, res.api_version, "Gizmo")]}
        if finalizers:
            meta["finalizers"] = finalizers
        await client.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}, ns)
        return ("owner", res), ("dep", "configmaps")
    owner = await client.create("deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "owner"},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "gc"}},
                 "template": {"metadata": {"labels": {"app": "gc"}},
                              "spec": {"containers": [{"name": "c", "image": "a:1"}]}}}}, ns)
    meta = {"name": "dep", "ownerReferences": [ref_to(owner, "apps/v1", "Deployment")]}
    if finalizers:
        meta["finalizers"] = finalizers
    await client.create(res, {"apiVersion": res.api_version, "kind": "Gizmo", "metadata": meta}, ns)
    return ("owner", "deployments"), ("dep", res)


@pytest.mark.parametrize("custom_owns", [True, False], ids=["gizmo-owns-configmap", "deployment-owns-gizmo"])
async def test_background_deletes_the_dependent(gizmos, custom_owns):
    client, ns, res = gizmos
    (owner, owner_res), (dep, dep_res) = await owner_and_dependent(client, ns, res, custom_owns)
    await client.delete(owner_res, owner, ns, propagation="Background")
    await eventually(lambda: gone(client, dep_res, dep, ns))


@pytest.mark.parametrize("custom_owns", [True, False], ids=["gizmo-owns-configmap", "deployment-owns-gizmo"])
async def test_orphan_removes_the_reference_and_keeps_the_dependent(gizmos, custom_owns):
    client, ns, res = gizmos
    (owner, owner_res), (dep, dep_res) = await owner_and_dependent(client, ns, res, custom_owns)
    await client.delete(owner_res, owner, ns, propagation="Orphan")

    async def orphaned():
        if not await gone(client, owner_res, owner, ns):
            return False
        return not (await client.get(dep_res, dep, ns))["metadata"].get("ownerReferences")
    await eventually(orphaned)


@pytest.mark.parametrize("custom_owns", [True, False], ids=["gizmo-owns-configmap", "deployment-owns-gizmo"])
async def test_foreground_holds_the_owner_until_the_dependent_is_gone(gizmos, custom_owns):
    """The dependent carries a finalizer of ours, so it stays terminating: meanwhile the owner stays with
    the foregroundDeletion finalizer; once the dependent goes, so does the owner."""
    client, ns, res = gizmos
    (owner, owner_res), (dep, dep_res) = await owner_and_dependent(client, ns, res, custom_owns, [HOLD])
    await client.delete(owner_res, owner, ns, propagation="Foreground")

    async def dependent_terminating():
        return (await client.get(dep_res, dep, ns))["metadata"].get("deletionTimestamp")
    await eventually(dependent_terminating)
    held = (await client.get(owner_res, owner, ns))["metadata"]
    assert held.get("deletionTimestamp") and "foregroundDeletion" in held["finalizers"]
    await client.patch(dep_res, dep, {"metadata": {"finalizers": None}}, ns)
    await eventually(lambda: gone(client, dep_res, dep, ns))
    await eventually(lambda: gone(client, owner_res, owner, ns))
