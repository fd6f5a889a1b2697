"""The bind reads the stored pod without a copy (`shared=True`) and hands the store a new object that copies
what it changes (`owned=True`): the stored pod, its watch event and the previous state are each as a
copying store would leave them, and nothing the bind's caller still holds (the Binding body) is shared with
the store."""

from typing import Any

from nodeagent.api.resources import builtin
from nodeagent.apiserver.registry import Registry
from nodeagent.apiserver.request import RequestInfo
from nodeagent.apiserver.subresources import _bind
from nodeagent.store.memory import MemoryStore

NS, PODS = builtin("", "v1", "namespaces"), builtin("", "v1", "pods")


async def test_a_bind_leaves_the_store_as_a_copying_update_would() -> None:
    store = MemoryStore()
    reg = Registry(store)
    await reg.create(NS, None, {"metadata": {"name": "d"}})
    created = await reg.create(PODS, "d", {"metadata": {"name": "p", "annotations": {"a": "1"}},
                                           "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    before = store.revision
    body: dict[str, Any] = {"metadata": {"annotations": {"b": "2"}}, "target": {"kind": "Node", "name": "n1"}}
    info = RequestInfo(PODS, "d", "p", "binding", "create")
    await _bind(reg, info, body, dry_run=False)
    body["metadata"]["annotations"]["b"] = "changed"  # the caller's body is its own still
    body["target"]["name"] = "n2"
    got = await reg.get(PODS, "d", "p")
    assert got["spec"]["nodeName"] == "n1" and got["metadata"]["annotations"] == {"a": "1", "b": "2"}
    assert [c["type"] for c in got["status"]["conditions"]] == ["PodScheduled"]
    got["spec"]["nodeName"] = "mutated"  # a reader's copy, not the stored object
    assert (await reg.get(PODS, "d", "p"))["spec"]["nodeName"] == "n1"
    ev = store._history[-1]
    assert ev.type == "MODIFIED" and ev.revision == before + 1 and ev.object["spec"]["nodeName"] == "n1"
    prev = ev.prev  # the pod before the bind, as watchers and list_at see it: untouched by the bind
    assert prev is not None
    assert "nodeName" not in prev["spec"] and prev["metadata"]["annotations"] == {"a": "1"}
    assert prev["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert not [c for c in (prev.get("status") or {}).get("conditions") or () if c["type"] == "PodScheduled"]
