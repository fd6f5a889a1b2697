"""The container-start hooks against a fake CRI server: the built environment and expanded command reach
CreateContainer; a missing Secret is CreateContainerConfigError until it appears; pull secrets become
PullImage's AuthConfig, each matching login tried in turn."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from kernel.testing import RecordingSyscalls
from nodeagent.kubelet.envvars import Env, NotFound, PodContext, make_environment
from nodeagent.kubelet.kuberuntime import PodRuntime
from nodeagent.kubelet.pullsecrets import Credential, credentials_for
from nodeagent.kubelet.volumes.manager import VolumeManager
from nodeagent.testing.clock import FakeClock
from nodeagent.testing.fake_cri import FakeRuntime, serve

IMG = "localhost/busybox:latest"
PRIVATE = "127.0.0.1:5000/team/app:v1"


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def record(self, obj: Any, type_: str, reason: str, message: str) -> None:
        self.events.append((type_, reason, message))


class Objects:
    """A ContainerSources over a dict of Secrets (what secrets.PodObjects reads from its watches)."""

    def __init__(self) -> None:
        self.secrets: dict[str, dict[str, Any]] = {}

    def _get(self, namespace: str, name: str) -> Mapping[str, Any]:
        if name not in self.secrets:
            raise NotFound(f'secret "{name}" not found')
        return self.secrets[name]

    async def environment(self, pod: Mapping[str, Any], container: Mapping[str, Any],
                          pod_ips: list[str]) -> Env:
        return make_environment(pod, container, get_secret=self._get, get_configmap=self._get,
                                services={"KUBERNETES_SERVICE_HOST": "10.0.0.1"},
                                ctx=PodContext(tuple(pod_ips), ("192.0.2.1",)))

    async def pull_credentials(self, pod: Mapping[str, Any],
                               image: str) -> tuple[list[Credential], list[str]]:
        names = [r["name"] for r in pod["spec"].get("imagePullSecrets") or []]
        found = [self.secrets[n] for n in names if n in self.secrets]
        return credentials_for(image, found), [f"default/{n}" for n in names if n not in self.secrets]


def _pod(container: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "default", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": IMG, "imagePullPolicy": "IfNotPresent",
                                     **container}], **spec}, "status": {}}


@pytest.fixture
async def rt(tmp_path: Path):
    clock = FakeClock(1_700_000_000.0)
    cri = FakeRuntime(images=(IMG,), clock=clock)
    rec = Recorder()
    objects = Objects()
    async with serve(cri) as client:
        vm = VolumeManager(tmp_path / "kubelet", sc=RecordingSyscalls())
        r = PodRuntime(client, vm, rec, clock, log_root=tmp_path / "logs",
                       cgroup_root=("inst",), memory_capacity=8 << 30, runtime_name="fake", sources=objects)
        yield r, cri, rec, objects, clock


async def test_environment_and_expanded_command_reach_create_container(rt) -> None:
    r, cri, rec, objects, clock = rt
    objects.secrets["db"] = {"data": {"pw": base64.b64encode(b"hunter2").decode()}}
    pod = _pod({"command": ["sh", "-c", "echo $(GREETING) $$(HOME)"], "args": ["$(PW)"],
                "env": [{"name": "GREETING", "value": "hi from $(KUBERNETES_SERVICE_HOST)"},
                        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}]})
    await r.sync(pod)
    cfg = cri.last_config
    env = {e.key: e.value for e in cfg.envs}
    assert env == {"GREETING": "hi from 10.0.0.1", "PW": "hunter2", "KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert list(cfg.command) == ["sh", "-c", "echo hi from 10.0.0.1 $(HOME)"]
    assert list(cfg.args) == ["hunter2"]


async def test_missing_secret_waits_in_create_container_config_error_until_it_appears(rt) -> None:
    r, cri, rec, objects, clock = rt
    pod = _pod({"env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}]})
    st = await r.sync(pod)
    waiting = r.pod_status(pod, st, [])["containerStatuses"][0]["state"]["waiting"]
    assert waiting == {"reason": "CreateContainerConfigError", "message": 'secret "db" not found'}
    assert ("Warning", "Failed", 'Error: secret "db" not found') in rec.events
    assert not [c for c in cri.calls if c[0] == "CreateContainer"]
    objects.secrets["db"] = {"data": {"other": ""}}
    st = await r.sync(pod)
    waiting = r.pod_status(pod, st, [])["containerStatuses"][0]["state"]["waiting"]
    assert waiting["message"] == "couldn't find key pw in Secret default/db"
    objects.secrets["db"] = {"data": {"pw": base64.b64encode(b"x").decode()}}
    st = await r.sync(pod)
    assert "running" in r.pod_status(pod, st, [])["containerStatuses"][0]["state"]


def _pull_secret(user: str, password: str) -> dict[str, Any]:
    doc = {"auths": {"127.0.0.1:5000": {"username": user, "password": password}}}
    return {"type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": base64.b64encode(json.dumps(doc).encode()).decode()}}


async def test_pull_secrets_become_auth_configs_tried_in_turn(rt) -> None:
    r, cri, rec, objects, clock = rt
    cri.private[PRIVATE] = ("puller", "right")
    objects.secrets["a-wrong"] = _pull_secret("puller", "wrong")
    objects.secrets["b-right"] = _pull_secret("puller", "right")
    refs = [{"name": "a-wrong"}, {"name": "b-right"}, {"name": "gone"}]
    pod = _pod({"image": PRIVATE}, imagePullSecrets=refs)
    st = await r.sync(pod)
    assert [a for a in cri.pull_auths if a[0] == PRIVATE] == [(PRIVATE, "puller", "wrong"),
                                                              (PRIVATE, "puller", "right")]
    assert "running" in r.pod_status(pod, st, [])["containerStatuses"][0]["state"]
    assert ("Warning", "FailedToRetrieveImagePullSecret",
            "Unable to retrieve some image pull secrets (default/gone); attempting to pull the image may not "
            "succeed.") in rec.events


async def test_without_a_matching_secret_the_pull_is_anonymous_and_fails_with_the_reason(rt) -> None:
    r, cri, rec, objects, clock = rt
    cri.private[PRIVATE] = ("puller", "right")
    pod = _pod({"image": PRIVATE})
    st = await r.sync(pod)
    assert cri.pull_auths == [(PRIVATE, "", "")]
    waiting = r.pod_status(pod, st, [])["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "ErrImagePull"
    assert "401 Unauthorized" in waiting["message"]


async def test_sub_path_expr_expands_against_the_environment_and_its_directory_is_made(rt) -> None:
    r, cri, rec, objects, clock = rt
    pod = _pod({"env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "volumeMounts": [{"name": "work", "mountPath": "/work", "subPathExpr": "$(POD_NAME)/data"}]},
               volumes=[{"name": "work", "emptyDir": {}}])
    await r.sync(pod)
    mount = next(m for m in cri.last_config.mounts if m.container_path == "/work")
    # the runtime mounts the kubelet's bind of the subPath (volume-subpaths/<volume>/<container>/<index>)
    assert mount.host_path.endswith("/volume-subpaths/work/c/0")
    made = Path(r.volumes.pod_dir(pod["metadata"]["uid"]), "volumes/kubernetes.io~empty-dir/work/p/data")
    assert await asyncio.to_thread(made.is_dir)
    (src, target, *_), = r.volumes.sc.of("mount")
    assert src.startswith("/proc/self/fd/") and target == mount.host_path


@pytest.mark.parametrize(("mount", "message"), [
    ({"subPathExpr": "$(UNSET)/x"}, "missing value for UNSET"),
    ({"subPathExpr": "$(EMPTY)"}, "missing value for EMPTY"),
    ({"subPath": "/abs"}, "error SubPath `/abs` must not be an absolute path"),
    ({"subPathExpr": "a/../$(DOTS)"}, "unable to provision SubPath `a/../..`: must not contain '..'"),
])
async def test_bad_sub_paths_are_create_container_config_errors(rt, mount: dict[str, Any],
                                                                message: str) -> None:
    r, cri, rec, objects, clock = rt
    pod = _pod({"env": [{"name": "EMPTY", "value": ""}, {"name": "DOTS", "value": ".."}],
                "volumeMounts": [{"name": "work", "mountPath": "/work", **mount}]},
               volumes=[{"name": "work", "emptyDir": {}}])
    st = await r.sync(pod)
    waiting = r.pod_status(pod, st, [])["containerStatuses"][0]["state"]["waiting"]
    assert waiting == {"reason": "CreateContainerConfigError", "message": message}
    assert not [c for c in cri.calls if c[0] == "CreateContainer"]
