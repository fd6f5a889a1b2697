"""The kubelet's watch-based Secret/ConfigMap manager and Services informer against a real apiserver:
one single-object watch per referenced object while a pod refers to it, a container environment built
from memory (no GET per start), a missing Secret answered NotFound until it is created."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from nodeagent.client.rest import Client
from nodeagent.kubelet.envvars import EnvError, NotFound
from nodeagent.kubelet.secrets import PodObjects
from nodeagent.testing.apiserver import ServerProcess, start_server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    srv = start_server(tmp_path_factory.mktemp("pod-objects"))
    yield srv
    srv.stop()


POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "default", "uid": "uid-1"},
    "spec": {"containers": [{"name": "c", "image": "busybox",
                             "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "late",
                                                                                      "key": "token"}}}],
                             "envFrom": [{"configMapRef": {"name": "settings", "optional": True}}]}],
             "volumes": [{"name": "v", "secret": {"secretName": "vol-secret"}}],
             "imagePullSecrets": [{"name": "regcred"}]},
}


async def test_watches_follow_the_pods_that_refer_to_them(server: ServerProcess) -> None:
    async with Client(server.url, server.token, ca_file=str(server.ca_file)) as client:
        objects = PodObjects(client, host_ips=lambda: ["192.0.2.1"], node_allocatable=lambda: {})
        ready = asyncio.Event()
        task = asyncio.create_task(objects.run(ready))
        try:
            await asyncio.wait_for(ready.wait(), 10)
            objects.register(POD)
            assert objects.secrets.watched() == {("default", "late"), ("default", "vol-secret"),
                                                 ("default", "regcred")}
            assert objects.configmaps.watched() == {("default", "settings")}

            gets = []
            real_get = client.get

            async def counting_get(*a: Any, **kw: Any) -> Any:
                gets.append(a)
                return await real_get(*a, **kw)
            client.get = counting_get  # type: ignore[method-assign]

            with pytest.raises(NotFound, match='secret "late" not found'):
                await objects.environment(POD, POD["spec"]["containers"][0], ["10.1.0.2"])
            secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "late"},
                      "stringData": {"token": "arrived"}}
            await client.create("secrets", secret, "default")
            async with asyncio.timeout(20):  # the watch delivers it
                while True:
                    try:
                        env = await objects.environment(POD, POD["spec"]["containers"][0], ["10.1.0.2"])
                        break
                    except NotFound:
                        await asyncio.sleep(0.05)
            values = env.as_dict()
            assert values["TOKEN"] == "arrived"
            assert values["KUBERNETES_SERVICE_HOST"]  # the master Service, from the informer
            assert gets == [], "the environment was read with GETs instead of the watches"

            other = {**POD, "metadata": {**POD["metadata"], "uid": "uid-2"}}
            objects.register(other)
            objects.unregister("uid-1")
            assert ("default", "late") in objects.secrets.watched()  # still wanted by uid-2
            objects.unregister("uid-2")
            assert objects.secrets.watched() == set() and objects.configmaps.watched() == set()
            with pytest.raises(EnvError, match="not registered"):
                await objects.secrets.get("default", "late")
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await client.delete("secrets", "late", "default")
