"""An apiserver's list and watch in memory, for informer tests: lists `items`, then streams `events`;
answers SelfSubjectAccessReviews as `allowed` says (what `informer.shared` asks a new identity)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any


class ListWatchClient:
    def __init__(self, items: list[dict[str, Any]], allowed: bool = True, name: str = "fake") -> None:
        self.identity = ("fake", name, id(self))
        self.items = items
        self.allowed = allowed
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.lists = 0
        self.reviews: list[dict[str, Any]] = []  # the resourceAttributes of each access review

    async def list(self, *a: Any, **kw: Any) -> dict[str, Any]:
        self.lists += 1
        return {"items": list(self.items), "metadata": {"resourceVersion": "1"}}

    async def watch(self, *a: Any, **kw: Any) -> AsyncIterator[dict[str, Any]]:
        while True:
            yield await self.events.get()

    async def create(self, resource: str, obj: dict[str, Any], *a: Any, **kw: Any) -> dict[str, Any]:
        if resource != "selfsubjectaccessreviews":
            raise NotImplementedError(f"ListWatchClient creates no {resource}")
        self.reviews.append(obj["spec"]["resourceAttributes"])
        return {**obj, "status": {"allowed": self.allowed,
                                  **({} if self.allowed else {"reason": "no RBAC rule"})}}
