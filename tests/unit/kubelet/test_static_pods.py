import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from nodeagent.kubelet.static_pods import (
    CONFIG_HASH,
    CONFIG_MIRROR,
    CONFIG_SEEN,
    CONFIG_SOURCE,
    ManifestError,
    StaticPodSource,
    decode_manifest,
    is_mirror_pod,
    is_static_pod,
    mirror_matches,
    mirror_pod,
)
from nodeagent.testing.clock import FakeClock

WEB = """
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web}
spec:
  containers:
  - name: httpd
    image: busybox:1.36
    ports: [{containerPort: 80}]
"""

TWO = """
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: kube-system}
spec: {containers: [{name: c, image: busybox}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b}
spec: {containers: [{name: c, image: busybox@sha256:abcd}]}
"""


def _changed(src: StaticPodSource) -> list[dict[str, Any]]:
    """The pods of a poll that saw a change (`poll` answers None when nothing changed)."""
    pods = src.poll()
    assert pods is not None, "no change seen"
    return pods


def test_static_pod_defaults(tmp_path: Path):
    (tmp_path / "web.yaml").write_text(WEB)
    src = StaticPodSource(tmp_path, "node1", FakeClock())
    (p,) = _changed(src)
    meta = p["metadata"]
    assert meta["name"] == "web-node1" and meta["namespace"] == "default"
    assert len(meta["uid"]) == 32
    assert meta["annotations"][CONFIG_HASH] == meta["uid"]
    assert meta["annotations"][CONFIG_SOURCE] == "file"
    assert meta["annotations"][CONFIG_SEEN].endswith("Z")
    assert p["spec"]["nodeName"] == "node1"
    assert {"operator": "Exists", "effect": "NoExecute"} in p["spec"]["tolerations"]
    assert p["spec"]["restartPolicy"] == "Always"
    c = p["spec"]["containers"][0]
    assert c["imagePullPolicy"] == "IfNotPresent" and c["ports"][0]["protocol"] == "TCP"
    assert p["status"] == {"phase": "Pending"}
    assert is_static_pod(p) and not is_mirror_pod(p)


def test_uid_is_stable_and_depends_on_content_node_and_file(tmp_path: Path):
    (tmp_path / "web.yaml").write_text(WEB)
    uid1 = StaticPodSource(tmp_path, "node1").read()[0]["metadata"]["uid"]
    assert StaticPodSource(tmp_path, "node1").read()[0]["metadata"]["uid"] == uid1
    assert StaticPodSource(tmp_path, "node2").read()[0]["metadata"]["uid"] != uid1
    os.rename(tmp_path / "web.yaml", tmp_path / "other.yaml")
    assert StaticPodSource(tmp_path, "node1").read()[0]["metadata"]["uid"] != uid1
    (tmp_path / "other.yaml").write_text(WEB.replace("1.36", "1.37"))
    assert StaticPodSource(tmp_path, "node1").read()[0]["metadata"]["uid"] != uid1


def test_multi_doc_json_podlist_hidden_and_bad_files(tmp_path: Path):
    (tmp_path / "two.yaml").write_text(TWO)
    pod_json = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "j"},
                "spec": {"containers": [{"name": "c", "image": "busybox:latest"}]}}
    (tmp_path / "j.json").write_text(json.dumps(pod_json))
    (tmp_path / "list.yaml").write_text(json.dumps({"kind": "PodList",
                                                    "items": [dict(pod_json, metadata={"name": "l"})]}))
    (tmp_path / ".hidden.yaml").write_text(WEB)
    (tmp_path / "bad.yaml").write_text("kind: Deployment\nmetadata: {name: x}\n")
    (tmp_path / "subdir").mkdir()
    src = StaticPodSource(tmp_path, "n")
    pods = _changed(src)
    names = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in pods]
    assert names == [("default", "j-n"), ("default", "l-n"), ("kube-system", "a-n"), ("default", "b-n")]
    assert len({p["metadata"]["uid"] for p in pods}) == 4
    assert list(src.errors) == ["bad.yaml"]
    assert pods[0]["spec"]["containers"][0]["imagePullPolicy"] == "Always"
    assert pods[3]["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"


@pytest.mark.parametrize("text", ["kind: Pod\nmetadata: {}\nspec: {containers: [{name: c}]}\n",
                                  "kind: Pod\nmetadata: {name: x}\nspec: {}\n", "- a\n- b\n", "a: [\n"])
def test_decode_errors(text):
    with pytest.raises(ManifestError):
        decode_manifest(text)


def test_poll_detects_changes_by_mtime(tmp_path: Path):
    f = tmp_path / "web.yaml"
    f.write_text(WEB)
    src = StaticPodSource(tmp_path, "n")
    first = _changed(src)
    assert src.poll() is None
    seen = first[0]["metadata"]["annotations"][CONFIG_SEEN]
    st = f.stat()
    f.write_text(WEB.replace("1.36", "1.37"))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    changed = _changed(src)
    assert changed[0]["spec"]["containers"][0]["image"] == "busybox:1.37"
    assert changed[0]["metadata"]["uid"] != first[0]["metadata"]["uid"]
    f.unlink()
    assert src.poll() == []
    # the same content again keeps no memory of the old first-seen time once it was gone
    f.write_text(WEB)
    again = _changed(src)
    assert again[0]["metadata"]["uid"] == first[0]["metadata"]["uid"]
    assert CONFIG_SEEN in again[0]["metadata"]["annotations"] and seen


async def test_run_sends_initial_and_changes(tmp_path: Path):
    clock = FakeClock()
    src = StaticPodSource(tmp_path / "manifests", "n", clock, period=5)
    updates = []
    task = asyncio.create_task(src.run(lambda pods: updates.append([p["metadata"]["name"] for p in pods])))
    for _ in range(500):  # bounded: a bug fails the test instead of hanging it
        await asyncio.sleep(0.01)
        if updates:
            break
    assert updates == [[]]  # missing directory: an empty initial set
    (tmp_path / "manifests").mkdir()
    (tmp_path / "manifests/web.yaml").write_text(WEB)
    clock.advance(5)
    for _ in range(500):
        await asyncio.sleep(0.01)
        if len(updates) > 1:
            break
    assert updates == [[], ["web-n"]]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_mirror_pod(tmp_path: Path):
    (tmp_path / "web.yaml").write_text(WEB)
    (static,) = StaticPodSource(tmp_path, "node1").read()
    m = mirror_pod(static, "node1", "node-uid-9")
    assert is_mirror_pod(m) and mirror_matches(static, m)
    assert m["metadata"]["annotations"][CONFIG_MIRROR] == static["metadata"]["uid"]
    assert m["metadata"]["annotations"][CONFIG_SOURCE] == "file"
    assert "uid" not in m["metadata"] and "status" not in m
    assert m["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": "node1",
                                                 "uid": "node-uid-9", "controller": True}]
    assert "uid" in static["metadata"]  # the static pod itself is untouched
    other = dict(m, metadata=dict(m["metadata"], annotations={CONFIG_MIRROR: "stale"}))
    assert not mirror_matches(static, other)


def test_seen_stamp_is_rfc3339nano():
    from nodeagent.kubelet.static_pods import _seen_stamp

    assert _seen_stamp(1_700_000_000.0) == "2023-11-14T22:13:20Z"
    assert _seen_stamp(1_700_000_000.25) == "2023-11-14T22:13:20.25Z"


async def test_url_source_reads_pods_keeps_the_last_good_set_and_reports_changes():
    from aiohttp import web

    from nodeagent.kubelet.static_pods import URLPodSource

    state: dict[str, Any] = {"status": 200, "body": "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n"
                                                    "spec: {containers: [{name: c, image: busybox}]}\n"}

    async def serve(request):
        return web.Response(status=state["status"], text=state["body"])

    app = web.Application()
    app.router.add_get("/pods", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/pods"
    try:
        src = URLPodSource(url, "n1")
        pods = await src.fetch()
        assert pods is not None
        (pod,) = pods
        ann = pod["metadata"]["annotations"]
        assert pod["metadata"]["name"] == "web-n1" and pod["spec"]["nodeName"] == "n1"
        assert ann["kubernetes.io/config.source"] == "http"
        assert ann["kubernetes.io/config.hash"] == pod["metadata"]["uid"]
        assert await src.fetch() is None  # unchanged body: no update
        state["status"] = 500
        assert await src.fetch() is None and "500" in src.error  # an error keeps the last good set
        state.update(status=200, body="")
        assert await src.fetch() == []  # emptied: every pod from the URL goes
    finally:
        await runner.cleanup()
