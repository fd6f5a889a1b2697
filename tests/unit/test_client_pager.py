"""The client's paged list: continue tokens followed to the end, and client-go's FullListIfExpired."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from nodeagent.apiserver.list_options import INCONSISTENT_CONTINUE
from nodeagent.client.rest import Client


async def serve(pages: dict[str, Any]) -> tuple[web.AppRunner, list[dict[str, str]]]:
    """A server answering /api/v1/configmaps from `pages` (query's continue -> answer)."""
    asked: list[dict[str, str]] = []

    async def handle(request: web.Request) -> web.Response:
        q = dict(request.query)
        asked.append(q)
        status, body = pages[q.get("continue", "") if q.get("limit") else "full"]
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_get("/api/v1/configmaps", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, asked


def page(names: str, rv: str, cont: str = "") -> tuple[int, dict[str, Any]]:
    meta = {"resourceVersion": rv, **({"continue": cont} if cont else {})}
    items = [{"metadata": {"name": n}} for n in names]
    return 200, {"kind": "ConfigMapList", "metadata": meta, "items": items}


async def test_a_continue_gone_ends_in_one_full_list():
    expired = (410, {"kind": "Status", "code": 410, "reason": "Expired", "message": INCONSISTENT_CONTINUE,
                     "metadata": {"continue": "latest"}})
    runner, asked = await serve({"": page("ab", "5", "t1"), "t1": page("cd", "5", "t2"), "t2": expired,
                                 "full": page("abcdef", "9")})
    client = Client(f"http://127.0.0.1:{runner.addresses[0][1]}")
    try:
        out = await client.list("configmaps", limit=2)
    finally:
        await client.close()
        await runner.cleanup()
    assert [i["metadata"]["name"] for i in out["items"]] == list("abcdef")
    assert out["metadata"]["resourceVersion"] == "9"
    assert [(q.get("limit"), q.get("continue")) for q in asked] == [("2", None), ("2", "t1"), ("2", "t2"),
                                                                    (None, None)]



async def test_a_metadata_list_from_a_server_that_sends_whole_objects():
    """client-go's metadata client against a server without the transform (it answers the plain list):
    the items kept as PartialObjectMetadata, ObjectMeta alone; the Accept header asks for the list kind."""
    cm = {"metadata": {"name": "a", "uid": "u1", "ownerReferences": [{"uid": "o"}]}, "data": {"b": "x" * 9}}
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Accept", ""))
        return web.json_response({"kind": "ConfigMapList", "metadata": {"resourceVersion": "3"},
                                  "items": [cm]})

    app = web.Application()
    app.router.add_get("/api/v1/configmaps", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    client = Client(f"http://127.0.0.1:{runner.addresses[0][1]}")
    try:
        out = await client.list("configmaps", metadata_only=True)
    finally:
        await client.close()
        await runner.cleanup()
    assert (out["kind"], out["metadata"]) == ("PartialObjectMetadataList", {"resourceVersion": "3"})
    assert out["items"] == [{"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": cm["metadata"]}]
    assert seen == ["application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"]
