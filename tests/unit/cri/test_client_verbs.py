"""CRIClient's verbs, declared for type checkers, are RuntimeClient's: same names, same parameters, the
same result without the await (cri/client/sync.py makes them from the coroutines at run time)."""

from __future__ import annotations

import ast
import asyncio
import inspect
from pathlib import Path
from types import ModuleType

import cri.client.aio
import cri.client.sync
from cri.client import CRIClient, RuntimeClient


def _class(module: ModuleType, name: str) -> ast.ClassDef:
    tree = ast.parse(Path(inspect.getfile(module)).read_text())
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _signature(f: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, str]:
    return ast.unparse(f.args), ast.unparse(f.returns) if f.returns is not None else ""


def _async_verbs() -> dict[str, tuple[str, str]]:
    return {f.name: _signature(f) for f in _class(cri.client.aio, "RuntimeClient").body
            if isinstance(f, ast.AsyncFunctionDef) and not f.name.startswith("_") and f.name != "close"}


def _declared_verbs() -> dict[str, tuple[str, str]]:
    block = next(n for n in _class(cri.client.sync, "CRIClient").body
                 if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    return {f.name: _signature(f) for f in block.body if isinstance(f, ast.FunctionDef)}


def test_declared_verbs_are_the_async_clients():
    assert _declared_verbs() == _async_verbs()


def test_every_declared_verb_is_served_at_run_time():
    client = CRIClient.__new__(CRIClient)
    client._core = RuntimeClient.over(None, None, 1.0, asyncio.sleep)  # no stub is called
    for name in _declared_verbs():
        assert inspect.iscoroutinefunction(getattr(RuntimeClient, name)), name
        assert callable(getattr(client, name)), name
