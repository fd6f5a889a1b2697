"""REST semantics over the in-memory store: metadata, generation, finalizers, graceful delete, admission."""

import asyncio

import pytest

from nodeagent.api.resources import builtin
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.registry import Registry
from nodeagent.store.memory import MemoryStore

NS, PODS, CMS = builtin("", "v1", "namespaces"), builtin("", "v1", "pods"), builtin("", "v1", "configmaps")
DEPLOY, QUOTA = builtin("apps", "v1", "deployments"), builtin("", "v1", "resourcequotas")
LR = builtin("", "v1", "limitranges")
PC = builtin("scheduling.k8s.io", "v1", "priorityclasses")


@pytest.fixture
async def reg():
    r = Registry(MemoryStore())
    await r.create(NS, None, {"metadata": {"name": "d"}})
    yield r
    await r.close()


def pod(name="p", **spec):
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec}}


async def test_create_sets_metadata_and_generate_name(reg):
    o = await reg.create(CMS, "d", {"metadata": {"generateName": "cm-"}})
    m = o["metadata"]
    assert m["name"].startswith("cm-") and len(m["name"]) == 8
    assert m["uid"] and m["creationTimestamp"].endswith("Z")
    assert m["resourceVersion"] and m["namespace"] == "d"
    with pytest.raises(ApiError) as e:
        await reg.create(CMS, "d", {"metadata": {"name": m["name"]}})
    assert e.value.code == 409 and e.value.reason == "AlreadyExists"


async def test_generation_bumps_on_spec_change_only_and_status_is_separate(reg):
    template = {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    d = {"metadata": {"name": "web"},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"a": "b"}}, "template": template}}
    o = await reg.create(DEPLOY, "d", d)
    assert o["metadata"]["generation"] == 1
    o["metadata"]["labels"] = {"x": "y"}
    o, _ = await reg.update(DEPLOY, "d", "web", o)
    assert o["metadata"]["generation"] == 1
    o["spec"]["replicas"] = 3
    o["status"] = {"replicas": 99}  # ignored on the main resource
    o, _ = await reg.update(DEPLOY, "d", "web", o)
    assert o["metadata"]["generation"] == 2 and "replicas" not in (o.get("status") or {})
    o["status"] = {"replicas": 3}
    o, _ = await reg.update(DEPLOY, "d", "web", o, "status")
    assert o["status"] == {"replicas": 3} and o["metadata"]["generation"] == 2
    stale = dict(o, metadata=dict(o["metadata"], resourceVersion="1"))
    with pytest.raises(ApiError) as e:
        await reg.update(DEPLOY, "d", "web", stale)
    assert e.value.code == 409 and e.value.reason == "Conflict"


async def test_finalizers_hold_deletion_until_removed(reg):
    await reg.create(CMS, "d", {"metadata": {"name": "f", "finalizers": ["example.com/x"]}})
    o = await reg.delete(CMS, "d", "f")
    assert o["metadata"]["deletionTimestamp"]
    got = await reg.get(CMS, "d", "f")
    got["metadata"]["finalizers"] = []
    await reg.update(CMS, "d", "f", got)
    with pytest.raises(ApiError) as e:
        await reg.get(CMS, "d", "f")
    assert e.value.code == 404


async def test_bound_pod_deletes_gracefully_then_with_zero(reg):
    await reg.create(PODS, "d", pod(nodeName="n1"))
    o = await reg.delete(PODS, "d", "p")
    assert o["metadata"]["deletionGracePeriodSeconds"] == 30
    await reg.get(PODS, "d", "p")  # still there: the kubelet finishes it
    await reg.delete(PODS, "d", "p", {"gracePeriodSeconds": 0})
    with pytest.raises(ApiError):
        await reg.get(PODS, "d", "p")
    await reg.create(PODS, "d", pod("q"))  # unscheduled: gone at once
    await reg.delete(PODS, "d", "q")
    with pytest.raises(ApiError):
        await reg.get(PODS, "d", "q")


async def test_delete_preconditions(reg):
    await reg.create(CMS, "d", {"metadata": {"name": "c"}})
    with pytest.raises(ApiError) as e:
        await reg.delete(CMS, "d", "c", {"preconditions": {"uid": "wrong"}})
    assert e.value.code == 409 and "Precondition failed" in e.value.message


async def test_quota_limitrange_priority(reg):
    await reg.create(LR, "d", {"metadata": {"name": "lr"}, "spec": {"limits": [
        {"type": "Container", "default": {"cpu": "200m", "memory": "64Mi"},
         "defaultRequest": {"cpu": "100m", "memory": "32Mi"}, "max": {"cpu": "1"}}]}})
    await reg.create(QUOTA, "d",
                     {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "2", "requests.cpu": "250m"}}})
    await reg.create(PC, None, {"metadata": {"name": "high"}, "value": 1000})
    p = await reg.create(PODS, "d", pod("a", priorityClassName="high"))
    assert p["spec"]["containers"][0]["resources"] == {"limits": {"cpu": "200m", "memory": "64Mi"},
                                                      "requests": {"cpu": "100m", "memory": "32Mi"}}
    assert p["spec"]["priority"] == 1000 and p["status"]["qosClass"] == "Burstable"
    await reg.create(PODS, "d", pod("b"))
    with pytest.raises(ApiError) as e:
        await reg.create(PODS, "d", pod("c"))
    assert e.value.code == 403 and "exceeded quota: q" in e.value.message
    q = await reg.get(QUOTA, "d", "q")
    assert q["status"]["used"]["pods"] == "2"
    big = pod("big")
    big["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2"}}
    with pytest.raises(ApiError) as e:
        await reg.create(PODS, "d", big)
    assert e.value.code == 403
    with pytest.raises(ApiError) as e:
        await reg.create(PODS, "d", pod("x", priorityClassName="nope"))
    assert e.value.code == 403 and "no PriorityClass with name nope" in e.value.message


async def test_namespace_deletion_empties_it(reg):
    await reg.create(NS, None, {"metadata": {"name": "gone"}})
    await reg.create(CMS, "gone", {"metadata": {"name": "c"}})
    o = await reg.delete(NS, None, "gone")
    assert o["status"]["phase"] == "Terminating"
    with pytest.raises(ApiError) as e:
        await reg.create(CMS, "gone", {"metadata": {"name": "new"}})
    assert e.value.code == 403
    for _ in range(100):
        try:
            await reg.get(NS, None, "gone")
        except ApiError:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("namespace was not removed")
    items, _ = await reg.list(CMS, "gone")
    assert items == []


async def test_immutable_fields_on_update(reg):
    await reg.create(PODS, "d", pod())
    p = await reg.get(PODS, "d", "p")
    p["spec"]["containers"][0]["image"] = "busybox:2"  # allowed
    p, _ = await reg.update(PODS, "d", "p", p)
    p["spec"]["nodeName"] = "n1"  # only through binding
    with pytest.raises(ApiError) as e:
        await reg.update(PODS, "d", "p", p)
    assert e.value.code == 422 and e.value.details
    assert e.value.details["causes"][0]["field"] == "spec.nodeName"
    p = await reg.get(PODS, "d", "p")
    p["spec"]["containers"][0]["ports"] = [{"containerPort": 1}]
    with pytest.raises(ApiError) as e:
        await reg.update(PODS, "d", "p", p)
    assert e.value.code == 422
    svc = await reg.create(builtin("", "v1", "services"), "d",
                           {"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}})
    svc["spec"]["clusterIP"] = "10.96.0.77" if svc["spec"]["clusterIP"] != "10.96.0.77" else "10.96.0.78"
    with pytest.raises(ApiError) as e:
        await reg.update(builtin("", "v1", "services"), "d", "s", svc)
    assert e.value.code == 422


async def test_orphan_and_foreground_leave_it_to_the_garbage_collector(reg):
    for name, policy, fin in (("o", "Orphan", "orphan"), ("f", "Foreground", "foregroundDeletion")):
        await reg.create(CMS, "d", {"metadata": {"name": name}})
        o = await reg.delete(CMS, "d", name, {"propagationPolicy": policy})
        assert o["metadata"]["deletionTimestamp"] and o["metadata"]["finalizers"] == [fin]
        o = await reg.get(CMS, "d", name)
        o["metadata"]["finalizers"] = []
        await reg.update(CMS, "d", name, o)  # the GC's last step
        with pytest.raises(ApiError):
            await reg.get(CMS, "d", name)


async def test_pods_without_pull_secrets_get_their_service_accounts(reg):
    """The ServiceAccount admission plugin: the account's imagePullSecrets, unless the pod names its own."""
    sa = builtin("", "v1", "serviceaccounts")
    await reg.create(sa, "d", {"metadata": {"name": "robot"}, "imagePullSecrets": [{"name": "regcred"}]})
    p = await reg.create(PODS, "d", pod("a", serviceAccountName="robot"))
    assert p["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    p = await reg.create(PODS, "d", pod("b", serviceAccountName="robot", imagePullSecrets=[{"name": "mine"}]))
    assert p["spec"]["imagePullSecrets"] == [{"name": "mine"}]
    p = await reg.create(PODS, "d", pod("c"))  # the default account (made with the namespace) has none
    assert "imagePullSecrets" not in p["spec"]


async def test_node_port_zero_is_unset(reg):
    svcs = builtin("", "v1", "services")
    s = await reg.create(svcs, "d", {"metadata": {"name": "z"},
                                     "spec": {"type": "ClusterIP", "ports": [{"port": 80, "nodePort": 0}]}})
    assert "nodePort" not in s["spec"]["ports"][0]
    n = await reg.create(svcs, "d", {"metadata": {"name": "n"},
                                     "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 0}]}})
    assert 30000 <= n["spec"]["ports"][0]["nodePort"] <= 32767
    with pytest.raises(ApiError) as e:  # a real nodePort on a ClusterIP Service is still refused, with why
        ports = [{"port": 80, "nodePort": 30080}]
        spec = {"type": "ClusterIP", "ports": ports}
        await reg.create(svcs, "d", {"metadata": {"name": "c"}, "spec": spec})
    assert e.value.code == 422
    assert e.value.message.endswith("spec.ports[0].nodePort: Forbidden: may not be used when `type` is "
                                    "'ClusterIP'")


async def test_an_ingress_naming_no_class_gets_the_default_one(reg):
    """kube-apiserver's DefaultIngressClass admission: the default IngressClass (the newest of several)
    fills spec.ingressClassName on create; a named class or the legacy annotation is left alone."""
    ic = builtin("networking.k8s.io", "v1", "ingressclasses")
    ing = builtin("networking.k8s.io", "v1", "ingresses")

    def klass(name, default):
        ann = {"ingressclass.kubernetes.io/is-default-class": "true"} if default else {}
        return {"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
                "metadata": {"name": name, "annotations": ann}, "spec": {"controller": f"x/{name}"}}

    def ingress(name, **spec):
        return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"defaultBackend": {"service": {"name": "s", "port": {"number": 80}}}, **spec}}

    await reg.create(NS, None, {"metadata": {"name": "default"}})
    before = await reg.create(ing, "default", ingress("before"))
    assert "ingressClassName" not in before["spec"]
    await reg.create(ic, None, klass("plain", False))
    await reg.create(ic, None, klass("nodeagent", True))
    assert (await reg.create(ing, "default", ingress("a")))["spec"]["ingressClassName"] == "nodeagent"
    named = await reg.create(ing, "default", ingress("b", ingressClassName="plain"))
    assert named["spec"]["ingressClassName"] == "plain"
    legacy = ingress("c")
    legacy["metadata"]["annotations"] = {"kubernetes.io/ingress.class": "plain"}
    assert "ingressClassName" not in (await reg.create(ing, "default", legacy))["spec"]
