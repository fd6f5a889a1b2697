"""ReplicaSet, Deployment and garbage collection against a real apiserver, with hollow nodes."""

from __future__ import annotations

import asyncio

import pytest

from nodeagent.client.rest import ClientError
from tests.harness.waiting import eventually
from tests.integration.controllers.conftest import kubectl, pods_of, template

pytestmark = pytest.mark.slow

def labels_of(kind: str, name: str) -> dict:
    return {"app": f"{kind}-{name}"}


async def test_replicaset_keeps_count_replaces_and_scales(cluster):
    client, ns = cluster
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web", "namespace": ns},
          "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "rs"}}, "template": template("rs")}}
    created = await client.create("replicasets", rs, ns)
    pods = await eventually(lambda: _n_pods(client, ns, "rs", 3))
    for p in pods:
        ref = p["metadata"]["ownerReferences"][0]
        assert ref["uid"] == created["metadata"]["uid"] and ref["controller"] is True
        assert p["metadata"]["name"].startswith("web-")
    await client.delete("pods", pods[0]["metadata"]["name"], ns, grace_period=0)
    replaced = await eventually(lambda: _n_pods(client, ns, "rs", 3, exclude=pods[0]["metadata"]["name"]))
    assert pods[0]["metadata"]["name"] not in [p["metadata"]["name"] for p in replaced]
    await client.patch("replicasets", "web", {"spec": {"replicas": 1}}, ns)
    await eventually(lambda: _n_pods(client, ns, "rs", 1))

    async def status_ok():
        st = (await client.get("replicasets", "web", ns)).get("status") or {}
        return st.get("replicas") == 1 and st.get("readyReplicas") == 1 and st.get("observedGeneration") == 2
    await eventually(status_ok)
    events = (await client.list("events", ns))["items"]
    reasons = {e["reason"] for e in events if e["involvedObject"]["name"] == "web"}
    assert {"SuccessfulCreate", "SuccessfulDelete"} <= reasons


async def _n_pods(client, ns, app, n, exclude=None):
    pods = await pods_of(client, ns, app)
    if exclude and any(p["metadata"]["name"] == exclude for p in pods):
        return None
    return pods if len(pods) == n else None


async def test_replicaset_adopts_orphans_and_releases_relabelled(cluster):
    client, ns = cluster
    orphan = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "orphan", "namespace": ns,
                                                               "labels": {"app": "adopt"}},
              "spec": template("adopt")["spec"]}
    await client.create("pods", orphan, ns)
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "adopter", "namespace": ns},
          "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "adopt"}},
                   "template": template("adopt")}}
    await client.create("replicasets", rs, ns)
    pods = await eventually(lambda: _n_pods(client, ns, "adopt", 2))
    adopted = next(p for p in pods if p["metadata"]["name"] == "orphan")
    assert adopted["metadata"]["ownerReferences"][0]["name"] == "adopter"
    await client.patch("pods", "orphan", {"metadata": {"labels": {"app": "gone"}}}, ns)

    async def released():
        p = await client.get("pods", "orphan", ns)
        return not p["metadata"].get("ownerReferences") and len(await pods_of(client, ns, "adopt")) == 2
    await eventually(released)


@pytest.mark.parametrize("version", ["1.32", "1.20"])
async def test_deployment_rollout_history_undo_with_kubectl(cluster, server, version):
    client, ns = cluster
    manifest = f"""
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx-deployment
  namespace: {ns}
  labels:
    app: nginx
spec:
  replicas: 3
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: nginx:1.14.2
        ports:
        - containerPort: 80
"""
    def run(*args, **kw):
        return asyncio.to_thread(kubectl, version, server, *args, **kw)

    await asyncio.to_thread(kubectl, version, server, "apply", "-f", "-", input=manifest)
    out = (await run("-n", ns, "rollout", "status", "deployment/nginx-deployment", "--timeout=60s")).stdout
    assert "successfully rolled out" in out
    rss = (await client.list("replicasets", ns))["items"]
    assert len(rss) == 1 and rss[0]["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"

    await run("-n", ns, "set", "image", "deployment/nginx-deployment", "nginx=nginx:1.16.1")
    out = (await run("-n", ns, "rollout", "status", "deployment/nginx-deployment", "--timeout=60s")).stdout
    assert "successfully rolled out" in out
    rss = {r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: r
           for r in (await client.list("replicasets", ns))["items"]}
    assert rss["1"]["spec"]["replicas"] == 0 and rss["2"]["spec"]["replicas"] == 3
    pods = await pods_of(client, ns, "nginx")
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {"nginx:1.16.1"}

    hist = (await run("-n", ns, "rollout", "history", "deployment/nginx-deployment")).stdout
    assert "1 " in hist and "2 " in hist
    await run("-n", ns, "rollout", "undo", "deployment/nginx-deployment")
    out = (await run("-n", ns, "rollout", "status", "deployment/nginx-deployment", "--timeout=60s")).stdout
    assert "successfully rolled out" in out

    async def back_on_old_image():
        pods = await pods_of(client, ns, "nginx")
        return len(pods) == 3 and {p["spec"]["containers"][0]["image"] for p in pods} == {"nginx:1.14.2"}
    await eventually(back_on_old_image)
    rs_revs = {r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
               for r in (await client.list("replicasets", ns))["items"]}
    assert rs_revs == {"2", "3"}  # the old ReplicaSet became revision 3

    await run("-n", ns, "scale", "deployment/nginx-deployment", "--replicas=5")
    await eventually(lambda: _n_pods(client, ns, "nginx", 5))
    events = (await client.list("events", ns))["items"]
    assert any(e["reason"] == "ScalingReplicaSet" for e in events)

    await run("-n", ns, "delete", "deployment", "nginx-deployment")

    async def all_gone():
        return not (await client.list("replicasets", ns))["items"] and not await pods_of(client, ns, "nginx")
    await eventually(all_gone)


@pytest.mark.parametrize("version", ["1.32", "1.20"])
async def test_rollout_undo_after_kubectl_create_deployment(cluster, server, version):
    """`kubectl create deployment` writes no annotations; the controller's revision makes undo work."""
    client, ns = cluster

    def run(*args, **kw):
        return asyncio.to_thread(kubectl, version, server, "-n", ns, *args, **kw)

    await run("create", "deployment", "web", "--image=busybox:1.35", "--replicas=2")

    async def revision(want):
        dep = await client.get("deployments", "web", ns)
        return (dep["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision") == want
    await eventually(lambda: revision("1"))
    await run("rollout", "status", "deployment/web", "--timeout=60s")
    await run("set", "image", "deployment/web", "busybox=busybox:1.36")
    await eventually(lambda: revision("2"))
    await run("rollout", "status", "deployment/web", "--timeout=60s")
    hist = (await run("rollout", "history", "deployment/web")).stdout
    assert [line.split()[0] for line in hist.splitlines()[2:] if line.strip()] == ["1", "2"]
    undo = await run("rollout", "undo", "deployment/web")
    assert "rolled back" in undo.stdout
    await eventually(lambda: revision("3"))
    await run("rollout", "status", "deployment/web", "--timeout=60s")
    dep = await client.get("deployments", "web", ns)
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:1.35"
    by_rev = {r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: r
              for r in (await client.list("replicasets", ns))["items"]}
    assert set(by_rev) == {"2", "3"}
    back = by_rev["3"]["metadata"]["annotations"]
    assert back["deployment.kubernetes.io/revision-history"] == "1"
    assert back["deployment.kubernetes.io/desired-replicas"] == "2"
    assert back["deployment.kubernetes.io/max-replicas"] == "3"
    hist = (await run("rollout", "history", "deployment/web", "--revision=3")).stdout
    assert "busybox:1.35" in hist


async def test_recreate_strategy_replaces_all_at_once(cluster):
    client, ns = cluster
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "rec", "namespace": ns},
           "spec": {"replicas": 2, "strategy": {"type": "Recreate"},
                    "selector": {"matchLabels": {"app": "rec"}},
                    "template": template("rec", "a:1")}}
    await client.create("deployments", dep, ns)
    await eventually(lambda: _n_pods(client, ns, "rec", 2))
    await client.patch("deployments", "rec", {"spec": {"template": template("rec", "a:2")}}, ns)

    async def rolled():
        pods = await pods_of(client, ns, "rec")
        return len(pods) == 2 and all(p["spec"]["containers"][0]["image"] == "a:2" for p in pods)
    await eventually(rolled)


@pytest.mark.parametrize("policy", ["Orphan", "Foreground"])
async def test_cascading_delete_policies(cluster, policy):
    client, ns = cluster
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "gc", "namespace": ns},
          "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "gc"}}, "template": template("gc")}}
    await client.create("replicasets", rs, ns)
    await eventually(lambda: _n_pods(client, ns, "gc", 2))
    await client.delete("replicasets", "gc", ns, propagation=policy)

    async def rs_gone():
        try:
            await client.get("replicasets", "gc", ns)
            return False
        except ClientError as e:
            return e.not_found
    await eventually(rs_gone)
    pods = await pods_of(client, ns, "gc")
    if policy == "Orphan":
        events = [(e["reason"], e["message"]) for e in (await client.list("events", ns))["items"]]
        assert len(pods) == 2, events
        assert all(not p["metadata"].get("ownerReferences") for p in pods)
    else:
        assert pods == []


async def test_orphaning_drops_only_the_deleted_owners_reference(cluster):
    """kube's garbage collector orphans with a strategic merge patch deleting the one reference by uid:
    the dependent's other owners stay."""
    client, ns = cluster

    def cm(name: str, refs: list[dict] | None = None) -> dict:
        meta: dict = {"name": name, "namespace": ns}
        if refs:
            meta["ownerReferences"] = refs
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}

    def ref(o: dict) -> dict:
        return {"apiVersion": "v1", "kind": "ConfigMap", "name": o["metadata"]["name"],
                "uid": o["metadata"]["uid"]}

    a = await client.create("configmaps", cm("owner-a"), ns)
    b = await client.create("configmaps", cm("owner-b"), ns)
    await client.create("configmaps", cm("dep", [ref(a), ref(b)]), ns)
    await client.delete("configmaps", "owner-a", ns, propagation="Orphan")

    async def orphaned():
        try:
            await client.get("configmaps", "owner-a", ns)
            return False
        except ClientError as e:
            if not e.not_found:
                raise
        dep = await client.get("configmaps", "dep", ns)
        return dep["metadata"].get("ownerReferences") == [ref(b)]
    await eventually(orphaned)


@pytest.mark.parametrize("version", ["1.32", "1.20"])
async def test_rollout_pause_and_resume_with_kubectl(cluster, server, version):
    client, ns = cluster
    dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "pz", "namespace": ns},
           "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "pz"}},
                    "template": template("pz", "a:1")}}
    await client.create("deployments", dep, ns)
    await eventually(lambda: _n_pods(client, ns, "pz", 2))

    def run(*args):
        return asyncio.to_thread(kubectl, version, server, "-n", ns, *args)

    await run("rollout", "pause", "deployment/pz")
    await run("set", "image", "deployment/pz", "c=a:2")

    async def progressing_paused():
        d = await client.get("deployments", "pz", ns)
        conds = {c["type"]: c for c in (d.get("status") or {}).get("conditions") or []}
        return conds.get("Progressing", {}).get("reason") == "DeploymentPaused"
    await eventually(progressing_paused)
    await asyncio.sleep(1.0)  # paused: the new template must not roll out
    assert {p["spec"]["containers"][0]["image"] for p in await pods_of(client, ns, "pz")} == {"a:1"}
    assert len((await client.list("replicasets", ns, label_selector="app=pz"))["items"]) == 1

    await run("rollout", "resume", "deployment/pz")
    out = (await run("rollout", "status", "deployment/pz", "--timeout=60s")).stdout
    assert "successfully rolled out" in out
    assert {p["spec"]["containers"][0]["image"] for p in await pods_of(client, ns, "pz")} == {"a:2"}


@pytest.mark.parametrize("version", ["1.32", "1.20"])
async def test_replicationcontroller_keeps_count_and_scales_with_kubectl(cluster, server, version):
    client, ns = cluster
    manifest = f"""
apiVersion: v1
kind: ReplicationController
metadata:
  name: rc
  namespace: {ns}
spec:
  replicas: 2
  template:
    metadata:
      labels:
        app: rc
    spec:
      containers:
      - name: c
        image: localhost/busybox:latest
        command: ["sleep", "3600"]
"""
    def run(*args, **kw):
        return asyncio.to_thread(kubectl, version, server, "-n", ns, *args, **kw)

    await run("apply", "-f", "-", input=manifest)
    rc = await client.get("replicationcontrollers", "rc", ns)
    assert rc["spec"]["selector"] == {"app": "rc"}  # defaulted from the template's labels
    pods = await eventually(lambda: _n_pods(client, ns, "rc", 2))
    ref = pods[0]["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["apiVersion"], ref["uid"]) == ("ReplicationController", "v1",
                                                            rc["metadata"]["uid"])
    out = await run("scale", "rc/rc", "--replicas=3")
    assert "scaled" in out.stdout
    await eventually(lambda: _n_pods(client, ns, "rc", 3))

    async def status_ok():
        st = (await client.get("replicationcontrollers", "rc", ns)).get("status") or {}
        return (st.get("replicas"), st.get("fullyLabeledReplicas"), st.get("readyReplicas"),
                st.get("availableReplicas"), st.get("observedGeneration")) == (3, 3, 3, 3, 2)
    await eventually(status_ok)
    got = (await run("get", "rc", "rc")).stdout.split("\n")[1].split()
    assert got[:4] == ["rc", "3", "3", "3"]  # NAME DESIRED CURRENT READY
    scale = await client.get("replicationcontrollers", "rc", ns, subresource="scale")
    assert scale["status"] == {"replicas": 3, "selector": "app=rc"}
    await run("delete", "rc", "rc")

    async def all_gone():
        return not await pods_of(client, ns, "rc")
    await eventually(all_gone)


async def test_dependents_of_a_custom_resource_are_collected(cluster):
    """An operator's children (ownerReferences to a custom resource, as kopf.adopt writes them) go with it:
    the collector finds the owner's kind through discovery, as kube's does through its REST mapper."""
    client, ns = cluster
    group = f"{ns}.example.com"
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": f"gizmos.{group}"},
           "spec": {"group": group, "scope": "Namespaced",
                    "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
                    "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema}]}}
    await client.create("customresourcedefinitions", crd)
    try:
        path = f"/apis/{group}/v1/namespaces/{ns}/gizmos"

        async def served():
            try:
                await client.request("GET", path)
                return True
            except ClientError:
                return False
        await eventually(served)
        owner = await client.request("POST", path, {"apiVersion": f"{group}/v1", "kind": "Gizmo",
                                                    "metadata": {"name": "g"}})
        ref = {"apiVersion": f"{group}/v1", "kind": "Gizmo", "name": "g", "uid": owner["metadata"]["uid"],
               "controller": True, "blockOwnerDeletion": True}
        for name in ("child", "stranger"):
            meta: dict = {"name": name, "namespace": ns}
            if name == "child":
                meta["ownerReferences"] = [ref]
            await client.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}, ns)
        await asyncio.sleep(1)
        assert (await client.get("configmaps", "child", ns))["metadata"]["name"] == "child"  # owner alive
        await client.request("DELETE", f"{path}/g")

        async def collected():
            try:
                await client.get("configmaps", "child", ns)
                return False
            except ClientError as e:
                return e.not_found
        await eventually(collected, within=30)
        assert (await client.get("configmaps", "stranger", ns))["metadata"]["name"] == "stranger"
    finally:
        await client.delete("customresourcedefinitions", f"gizmos.{group}")
