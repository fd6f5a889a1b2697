"""A pods/status merge patch racing a ReplicaSet's adoption of the pod (issue 26's density finding).

The server never lost the adoption's ownerReferences on a status write: a status write takes all metadata
from the stored object, and every patch is applied to the object at the stored resourceVersion and
written under that precondition, retried on a conflict (kube's GuaranteedUpdate). What lost them was the
controller's adoption patch: it pinned the informer's resourceVersion, so a status write landing between
the informer's read and the patch made it 409, and the controller dropped the conflict, leaving the pod an
orphan it had counted as adopted. kube's controller_ref_manager sends a strategic merge patch with the
pod's uid as precondition and no resourceVersion (podutil.adopt_patch), which the server applies to the
pod as it is now.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from nodeagent.api.resources import builtin
from nodeagent.apiserver import patching
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.registry import PODS, Registry
from nodeagent.apiserver.request import RequestInfo
from nodeagent.controllers import podutil
from nodeagent.store import base as store_base
from nodeagent.store.sqlite import SQLiteStore

NS = builtin("", "v1", "namespaces")
MERGE, STRATEGIC = "application/merge-patch+json", "application/strategic-merge-patch+json"
RS: dict[str, Any] = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
      "metadata": {"name": "adopter", "namespace": "d", "uid": "6f1c1f44-0000-4000-8000-000000000001"}}


@pytest.fixture
async def reg(tmp_path):
    store = SQLiteStore(str(tmp_path / "s.db"))  # a real writer thread: patches interleave at its awaits
    await store.start()
    r = Registry(store)
    await r.create(NS, None, {"metadata": {"name": "d"}})
    yield r
    await store.close()


async def make_pod(reg: Registry, name: str = "orphan") -> dict[str, Any]:
    return await reg.create(PODS, "d", {"metadata": {"name": name, "labels": {"app": "adopt"}},
                                        "spec": {"containers": [{"name": "c", "image": "busybox"}]}})


async def patch(reg: Registry, body: dict[str, Any], ptype: str, sub: str = "") -> dict[str, Any]:
    info = RequestInfo(PODS, "d", "orphan", sub, "patch", patch_type=ptype)
    obj, _ = await patching.patch(reg, {}, info, body, False, sub)
    return obj


async def test_pinned_adoption_loses_to_a_status_write_and_kubes_patch_does_not(reg):
    seen = await make_pod(reg)  # what the ReplicaSet controller's informer holds
    await patch(reg, {"status": {"phase": "Running"}}, MERGE, "status")  # the kubelet's write lands first
    pinned = {"metadata": {"ownerReferences": [podutil.owner_reference(RS)],
                           "resourceVersion": seen["metadata"]["resourceVersion"]}}
    with pytest.raises(ApiError) as e:  # what the controller sent before: a conflict it then dropped
        await patch(reg, pinned, MERGE)
    assert e.value.code == 409
    adopted = await patch(reg, podutil.adopt_patch(RS, seen), STRATEGIC)
    assert [r["uid"] for r in adopted["metadata"]["ownerReferences"]] == [RS["metadata"]["uid"]]
    assert adopted["status"]["phase"] == "Running"
    after = await patch(reg, {"status": {"phase": "Running", "podIP": "10.0.0.9"}}, MERGE, "status")
    assert after["metadata"]["ownerReferences"] == adopted["metadata"]["ownerReferences"]


def count_conflicts(reg: Registry) -> list[int]:
    """How many writes met a concurrent one (the patches really interleaved, each retried on the latest)."""
    n = [0]
    update = reg.store.update

    async def counted(key: str, obj: dict, expected_revision: int | None = None, *,
                      owned: bool = False) -> dict:
        try:
            return await update(key, obj, expected_revision, owned=owned)
        except store_base.Conflict:
            n[0] += 1
            raise

    reg.store.update = counted  # type: ignore[method-assign]
    return n


async def test_status_patches_interleaved_with_adoption_and_release_keep_every_write(reg):
    seen = await make_pod(reg)
    conflicts = count_conflicts(reg)
    statuses = [patch(reg, {"status": {"message": f"m{i}", "conditions": [
        {"type": f"C{i}", "status": "True"}]}}, STRATEGIC, "status") for i in range(20)]
    adopt = podutil.adopt_patch(RS, seen)
    await asyncio.gather(*statuses[:10], patch(reg, adopt, STRATEGIC), *statuses[10:])
    got = await reg.get(PODS, "d", "orphan")
    assert [r["uid"] for r in got["metadata"]["ownerReferences"]] == [RS["metadata"]["uid"]]
    assert {c["type"] for c in got["status"]["conditions"]} == {f"C{i}" for i in range(20)}
    assert conflicts[0] > 0
    other = {**RS, "metadata": {**RS["metadata"], "name": "other",
                                "uid": "6f1c1f44-0000-4000-8000-0000000000ff"}}
    ref = podutil.owner_reference(other, False) | {"controller": False}
    await patch(reg, {"metadata": {"ownerReferences": [ref], "uid": seen["metadata"]["uid"]}}, STRATEGIC)
    more = [patch(reg, {"status": {"message": f"n{i}"}}, MERGE, "status") for i in range(10)]
    release = podutil.release_patch(RS["metadata"]["uid"], seen)
    await asyncio.gather(*more[:5], patch(reg, release, STRATEGIC), *more[5:])
    got = await reg.get(PODS, "d", "orphan")
    assert [r["name"] for r in got["metadata"]["ownerReferences"]] == ["other"]  # only the released one went


async def test_the_uid_is_a_precondition(reg):
    seen = await make_pod(reg)
    await reg.delete(PODS, "d", "orphan", {"gracePeriodSeconds": 0})
    await make_pod(reg)  # another pod of the same name
    with pytest.raises(ApiError) as e:
        await patch(reg, podutil.adopt_patch(RS, seen), STRATEGIC)
    st = e.value.status()
    assert (st["code"], st["details"]["causes"]) == (422, [{
        "reason": "FieldValueInvalid", "field": "metadata.uid",
        "message": f'Invalid value: "{seen["metadata"]["uid"]}": field is immutable'}])
    with pytest.raises(ApiError) as e:  # a PUT carrying the old uid: kube's Preconditions on the update
        await reg.update(PODS, "d", "orphan",
                         {**seen, "metadata": {**seen["metadata"], "resourceVersion": ""}})
    assert e.value.code == 409 and "Precondition failed: UID in precondition" in e.value.message
    got = await reg.get(PODS, "d", "orphan")
    assert not got["metadata"].get("ownerReferences")


async def test_an_unconditional_status_update_is_applied_to_the_pod_as_it_is_now(reg):
    """A PUT of pods/status without a resourceVersion (what `kubectl replace --subresource=status` of an
    object stripped of it sends) racing other writes: kube's GuaranteedUpdate reads again, never 409s."""
    seen = await make_pod(reg)
    conflicts = count_conflicts(reg)
    body = {k: v for k, v in seen.items() if k != "status"}
    body["metadata"] = {k: v for k, v in seen["metadata"].items() if k != "resourceVersion"}

    async def put(i: int) -> None:
        await reg.update(PODS, "d", "orphan", {**body, "status": {"message": f"m{i}"}}, "status")

    await asyncio.gather(*(put(i) for i in range(4)), patch(reg, podutil.adopt_patch(RS, seen), STRATEGIC),
                         *(put(i) for i in range(4, 8)))
    got = await reg.get(PODS, "d", "orphan")
    assert conflicts[0] > 0  # they did meet each other
    assert [r["uid"] for r in got["metadata"]["ownerReferences"]] == [RS["metadata"]["uid"]]
    with pytest.raises(ApiError) as e:  # with the resourceVersion it read, a write still meets a 409
        await reg.update(PODS, "d", "orphan", {**seen, "status": {"message": "late"}}, "status")
    assert e.value.code == 409
