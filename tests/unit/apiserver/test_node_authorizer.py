"""The Node authorizer's graph (kube's plugin/pkg/auth/authorizer/node): a node reads a Secret, ConfigMap,
ServiceAccount or ResourceClaim only while a pod bound to it refers to it, by `get` or a single-object
list/watch; RBAC answers the rest (system:node is bound to nobody)."""

from __future__ import annotations

from typing import Any

from nodeagent.api.resources import builtin
from nodeagent.apiserver.authz.attributes import Attributes, Subject
from tests.unit.apiserver.test_rbac import AUTHED, cluster

PODS = builtin("", "v1", "pods")
CLAIMS = builtin("", "v1", "persistentvolumeclaims")
VOLUMES = builtin("", "v1", "persistentvolumes")


def node(name: str) -> Subject:
    return Subject(f"system:node:{name}", ("system:nodes", AUTHED))


def read(who: Subject, resource: str, name: str = "", verb: str = "get", ns: str = "team",
         fields: str = "", group: str = "") -> Attributes:
    return Attributes(who, verb, True, group, resource, "", ns, name, field_selector=fields)


def pod(name: str, on: str | None, **spec: Any) -> dict[str, Any]:
    s: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}], **spec}
    if on:
        s["nodeName"] = on
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team", "uid": name},
            "spec": s}


async def test_a_node_reads_only_what_its_pods_refer_to() -> None:
    reg, cache, authz = await cluster()
    store = reg.store
    a, b = node("a"), node("b")

    async def may(attrs: Attributes) -> tuple[bool, str]:
        await cache.wait_fresh()
        return await authz.authorize(attrs)

    env = [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}}]
    await store.create(PODS.key("team", "on-b"), pod(
        "on-b", "b", serviceAccountName="robot", volumes=[{"name": "v", "secret": {"secretName": "creds"}}],
        containers=[{"name": "c", "image": "x", "env": env}]))
    await store.create(PODS.key("team", "pending"), pod(
        "pending", None, volumes=[{"name": "v", "secret": {"secretName": "unscheduled"}}]))
    # node A cannot read the Secret only node B's pod uses; B can
    ok, why = await may(read(a, "secrets", "creds"))
    assert not ok and "no relationship found between node 'a' and this object" in why
    assert (await may(read(b, "secrets", "creds")))[0]
    assert (await may(read(b, "configmaps", "cfg")))[0] and not (await may(read(a, "configmaps", "cfg")))[0]
    assert (await may(read(b, "serviceaccounts", "robot")))[0]
    assert not (await may(read(b, "serviceaccounts", "default")))[0]
    assert not (await may(read(b, "secrets", "unscheduled")))[0]  # a pod bound to no node gives nobody
    assert not (await may(read(b, "secrets", "creds", ns="default")))[0]  # the name in another namespace
    # the kubelet's single-object watch is the same read; a list of them all is not
    for verb in ("list", "watch"):
        assert (await may(read(b, "secrets", verb=verb, fields="metadata.name=creds")))[0]
        assert not (await may(read(a, "secrets", verb=verb, fields="metadata.name=creds")))[0]
        assert not (await may(read(b, "secrets", verb=verb)))[0]
        assert not (await may(read(b, "secrets", verb=verb, ns="")))[0]
        # TLS Secrets for the node's ingress proxy, and the public root CA anywhere
        assert (await may(read(a, "secrets", verb=verb, ns="", fields="type=kubernetes.io/tls")))[0]
    assert (await may(read(a, "configmaps", "kube-root-ca.crt", ns="kube-system")))[0]
    # once a pod on A refers to it, A may read it too
    await store.create(PODS.key("team", "on-a"), pod(
        "on-a", "a", containers=[{"name": "c", "image": "x", "envFrom": [{"secretRef": {"name": "creds"}}]}]))
    assert (await may(read(a, "secrets", "creds")))[0]
    # and a node reads no Secret by writing: NodeRestriction still refuses
    assert not (await may(read(a, "secrets", "creds", verb="update")))[0]
    await cache.stop()


async def test_a_claims_volume_csi_secret_and_resource_claims() -> None:
    reg, cache, authz = await cluster()
    store = reg.store
    await store.create(VOLUMES.key(None, "pv-1"), {"metadata": {"name": "pv-1"}, "spec": {"csi": {
        "driver": "d", "volumeHandle": "h",
        "nodePublishSecretRef": {"name": "csi-creds", "namespace": "team"}}}})
    await store.create(CLAIMS.key("team", "data"), {"metadata": {"name": "data", "namespace": "team"},
                                                     "spec": {"volumeName": "pv-1"}})
    await store.create(PODS.key("team", "db"), pod(
        "db", "a", volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
        resourceClaims=[{"name": "gpu", "resourceClaimName": "gpu-claim"}]))
    await cache.wait_fresh()
    assert (await authz.authorize(read(node("a"), "secrets", "csi-creds")))[0]
    assert not (await authz.authorize(read(node("b"), "secrets", "csi-creds")))[0]
    # a node patches or deletes only the volumes pinned to it; one already gone is NotFound, not Forbidden
    gone = Attributes(node("a"), "patch", True, "", "persistentvolumes", "", "", "pv-gone")
    assert (await authz.authorize(gone, VOLUMES.key(None, "pv-gone")))[0]
    unpinned = Attributes(node("a"), "patch", True, "", "persistentvolumes", "", "", "pv-1")
    assert not (await authz.authorize(unpinned, VOLUMES.key(None, "pv-1")))[0]
    put = Attributes(node("a"), "update", True, "", "persistentvolumes", "", "", "pv-gone")
    assert not (await authz.authorize(put, VOLUMES.key(None, "pv-gone")))[0]  # an update could create it
    for verb, res, sub in (("patch", "pods", "status"), ("update", "pods", "status"), ("delete", "pods", "")):
        gone_pod = Attributes(node("a"), verb, True, "", res, sub, "team", "gone")
        assert (await authz.authorize(gone_pod, PODS.key("team", "gone")))[0], verb  # the handler: NotFound
    on_a = Attributes(node("b"), "patch", True, "", "pods", "status", "team", "db")
    assert not (await authz.authorize(on_a, PODS.key("team", "db")))[0]  # exists, bound to another node
    put_pod = Attributes(node("a"), "update", True, "", "pods", "", "team", "gone")
    assert not (await authz.authorize(put_pod, PODS.key("team", "gone")))[0]
    rc = read(node("a"), "resourceclaims", "gpu-claim", group="resource.k8s.io")
    assert (await authz.authorize(rc))[0]
    assert not (await authz.authorize(read(node("b"), "resourceclaims", "gpu-claim",
                                           group="resource.k8s.io")))[0]
    await cache.stop()


async def test_a_secret_an_ingress_names_for_tls_is_readable_by_name_whatever_its_type() -> None:
    """ingress-nginx serves `tls.crt`/`tls.key` from the Secret an Ingress names, of any type, on every node:
    every node may read that one Secret by name (get, or a single-object list/watch), and no other."""
    reg, cache, authz = await cluster()
    ingresses = builtin("networking.k8s.io", "v1", "ingresses")
    a = node("a")

    async def may(attrs: Attributes) -> tuple[bool, str]:
        await cache.wait_fresh()
        return await authz.authorize(attrs)

    assert not (await may(read(a, "secrets", "site-cert")))[0]
    await reg.store.create(ingresses.key("team", "web"), {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "web", "namespace": "team"},
        "spec": {"tls": [{"hosts": ["a.example"], "secretName": "site-cert"}],
                 "rules": [{"host": "a.example"}]}})
    assert (await may(read(a, "secrets", "site-cert")))[0]
    for verb in ("list", "watch"):
        assert (await may(read(a, "secrets", verb=verb, fields="metadata.name=site-cert")))[0]
        assert not (await may(read(a, "secrets", verb=verb)))[0]  # not the namespace's every Secret
    ok, why = await may(read(a, "secrets", "other"))
    assert not ok and "no relationship found" in why
    assert not (await may(read(a, "secrets", "site-cert", ns="default")))[0]  # the Ingress's namespace only
    assert not (await may(read(a, "configmaps", "site-cert")))[0]
    await cache.stop()
