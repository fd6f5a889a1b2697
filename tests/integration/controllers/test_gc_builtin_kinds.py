"""The garbage collector across built-in kinds outside its fixed informers (ServiceAccounts, Leases), as
kube's watches every deletable resource discovery lists: in all three propagation policies, against a real
apiserver and the in-process controllers."""

from __future__ import annotations

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
