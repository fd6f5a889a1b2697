"""Store keys in kube-apiserver's layout (`/registry/<resource>/<ns>/<name>`, its special prefixes, CRs
under their group) and the one-time move of objects stored under nodeagent's former keys."""

import pytest

from nodeagent.api.resources import Resource, builtin, split_key, split_prefix, sync_crd
from nodeagent.apiserver.cache import WatchCache
from nodeagent.apiserver.key_layout import migrate_legacy_keys
from nodeagent.store.base import NotFound
from nodeagent.store.memory import MemoryStore

PODS, NODES = builtin("", "v1", "pods"), builtin("", "v1", "nodes")
SERVICES, ENDPOINTS = builtin("", "v1", "services"), builtin("", "v1", "endpoints")
DEPLOY = builtin("apps", "v1", "deployments")

CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
       "metadata": {"name": "widgets.example.com"},
       "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [{"name": "v1", "served": True, "storage": True,
                              "schema": {"openAPIV3Schema": {"type": "object"}}}]}}


@pytest.mark.parametrize(("res", "ns", "key"), [
    (PODS, "default", "/registry/pods/default/p"),
    (NODES, None, "/registry/minions/p"),
    (SERVICES, "default", "/registry/services/specs/default/p"),
    (ENDPOINTS, "default", "/registry/services/endpoints/default/p"),
    (DEPLOY, "default", "/registry/deployments/default/p"),
    (builtin("", "v1", "replicationcontrollers"), "ns", "/registry/controllers/ns/p"),
    (builtin("networking.k8s.io", "v1", "ingresses"), "ns", "/registry/ingress/ns/p"),
    (builtin("rbac.authorization.k8s.io", "v1", "clusterroles"), None, "/registry/clusterroles/p"),
    (builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions"), None,
     "/registry/apiextensions.k8s.io/customresourcedefinitions/p"),
    (builtin("apiregistration.k8s.io", "v1", "apiservices"), None,
     "/registry/apiregistration.k8s.io/apiservices/p"),
    (Resource("example.com", "v1", "widgets", "Widget"), "ns", "/registry/example.com/widgets/ns/p"),
])
def test_keys_are_kube_apiservers(res, ns, key):
    assert res.key(ns, "p") == key


def test_split_key_knows_each_prefix_depth():
    sync_crd("widgets.example.com", CRD)
    try:
        assert split_key("/registry/pods/default/p") == ("/registry/pods/", "default", "p")
        assert split_key("/registry/minions/n1") == ("/registry/minions/", "", "n1")
        assert split_key("/registry/services/specs/kube-system/kube-dns") == (
            "/registry/services/specs/", "kube-system", "kube-dns")
        assert split_key("/registry/example.com/widgets/ns/w") == (
            "/registry/example.com/widgets/", "ns", "w")
        assert split_prefix(PODS.key_prefix("ns1")) == ("/registry/pods/", "ns1")
        assert split_prefix(PODS.key_prefix()) == ("/registry/pods/", None)
        assert split_prefix(SERVICES.key_prefix()) == ("/registry/services/specs/", None)
        assert split_prefix(NODES.key_prefix()) == ("/registry/minions/", None)
    finally:
        sync_crd("widgets.example.com", None)


def _obj(kind, name, ns=None, api="v1"):
    meta = {"name": name, **({"namespace": ns} if ns else {})}
    return {"apiVersion": api, "kind": kind, "metadata": meta}


async def test_migration_moves_legacy_keys_once_and_the_cache_serves_them():
    store = MemoryStore()
    await store.start()
    await store.create("/registry/core/pods/default/a", _obj("Pod", "a", "default"))
    await store.create("/registry/core/nodes/n1", _obj("Node", "n1"))
    await store.create("/registry/core/services/default/s", _obj("Service", "s", "default"))
    await store.create("/registry/apps/deployments/default/d", _obj("Deployment", "d", "default", "apps/v1"))
    # a move cut short by a kill: the object already at its new key, the old one still there
    cm = _obj("ConfigMap", "c", "default")
    await store.create("/registry/core/configmaps/default/c", cm | {"data": {"v": "old"}})
    await store.create("/registry/configmaps/default/c", cm | {"data": {"v": "new"}})
    await store.create("/registry/example.com/widgets/ns/w", _obj("Widget", "w", "ns", "example.com/v1"))

    assert await migrate_legacy_keys(store) == 5
    assert (await store.get("/registry/pods/default/a"))["metadata"]["name"] == "a"
    assert (await store.get("/registry/minions/n1"))["kind"] == "Node"
    assert (await store.get("/registry/services/specs/default/s"))["kind"] == "Service"
    assert (await store.get("/registry/deployments/default/d"))["kind"] == "Deployment"
    assert (await store.get("/registry/configmaps/default/c"))["data"] == {"v": "new"}
    assert (await store.get("/registry/example.com/widgets/ns/w"))["kind"] == "Widget"  # CRs never moved
    for old in ("/registry/core/pods/default/a", "/registry/core/nodes/n1",
                "/registry/core/configmaps/default/c"):
        with pytest.raises(NotFound):
            await store.get(old)
    assert await migrate_legacy_keys(store) == 0

    cache = WatchCache(store)
    await cache.start()
    try:
        pods, _ = cache.list(PODS.key_prefix(), None)
        assert [e.obj["metadata"]["name"] for e in pods] == ["a"]
        assert cache.get(NODES.key(None, "n1")) is not None
        assert cache.get(SERVICES.key("default", "s")) is not None
    finally:
        await cache.stop()
        await store.close()
