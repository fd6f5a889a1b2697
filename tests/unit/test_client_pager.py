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
