"""informer.Subset / pods_on_node: the kubelet reads its pods from the process's cache of every pod, seeing
what a watch with fieldSelector spec.nodeName=<node> would show it (a binding arrives as an add)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from nodeagent.client.informer import pods_on_node, shared
from nodeagent.testing.listwatch import ListWatchClient as _Client


def _pod(name: str, node: str = "", rv: int = 1) -> dict[str, Any]:
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": str(rv)},
            "spec": spec}


async def _settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_the_nodes_pods_as_a_watch_of_its_own_would_show_them():
    client = _Client([_pod("mine", "n1"), _pod("other", "n2"), _pod("pending")])
    seen: list[tuple[str, str]] = []
    mine = pods_on_node(client, "n1")  # type: ignore[arg-type]
    everyone = shared(client, "pods")  # type: ignore[arg-type]
    assert mine.informer.informer is everyone.informer  # one cache under both handles
    run = asyncio.create_task(mine.run(client=client))  # type: ignore[arg-type]
    try:
        await mine.wait_synced()
        remove = mine.add_handler(lambda o: seen.append(("add", o["metadata"]["name"])),
                                  lambda old, new: seen.append(("update", new["metadata"]["name"])),
                                  lambda o: seen.append(("delete", o["metadata"]["name"])))
        assert seen == [("add", "mine")]  # the replay of what is cached: only this node's
        assert [p["metadata"]["name"] for p in mine.list()] == ["mine"]
        assert mine.get("other", "ns") is None and mine.get("mine", "ns") is not None
        assert len(everyone.list()) == 3
        client.events.put_nowait({"type": "MODIFIED", "object": _pod("pending", "n1", 2)})  # bound here
        client.events.put_nowait({"type": "MODIFIED", "object": _pod("other", "n2", 3)})
        client.events.put_nowait({"type": "MODIFIED", "object": _pod("mine", "n1", 4)})
        client.events.put_nowait({"type": "DELETED", "object": _pod("other", "n2", 5)})
        client.events.put_nowait({"type": "DELETED", "object": _pod("mine", "n1", 6)})
        await _settle()
        assert seen[1:] == [("add", "pending"), ("update", "mine"), ("delete", "mine")]
        assert [p["metadata"]["name"] for p in mine.list()] == ["pending"]
        remove()
        client.events.put_nowait({"type": "DELETED", "object": _pod("pending", "n1", 7)})
        await _settle()
        assert seen[-1] == ("delete", "mine") and mine.list() == []
        assert client.lists == 1  # one list, one watch for both readers
    finally:
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
