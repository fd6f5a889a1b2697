"""Run a set of long-lived components under one owner until a signal stops them.

Each component is an async callable `serve(config, ready)` — by convention `<package>/service.py`, or
`<package>/<component>_service.py` where a package has several — that sets `ready` when it serves and
returns (or is cancelled) when the cluster stops; `config` is that component's own frozen config, built
by the command from its flags. They all live in one TaskGroup: one failing stops the rest, Ctrl-C cancels
them all and waits for their cleanup, so nothing outlives its owner.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import logging
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kernel.ordered_executor import OrderedExecutor

log = logging.getLogger("nodeagent.runner")

STOP_REPORT_EVERY = 5.0  # seconds between reports of components that have not stopped yet

Serve = Callable[[Any, asyncio.Event], Awaitable[None]]


@dataclasses.dataclass(frozen=True)
class Component:
    name: str
    target: str  # "package.module:function"
    issue: str  # which part of the project delivers it, for the "missing" message
    after: tuple[str, ...] = ()  # components that must be ready before this one starts

    def load(self) -> Serve | None:
        module, _, attr = self.target.partition(":")
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name and module.startswith(e.name):
                return None
            raise
        return getattr(mod, attr, None)


async def run_components(components: list[Component], configs: Mapping[str, Any] | None) -> int:
    """Start every component that exists with its config (`configs[name]`), report the missing ones, run
    until SIGINT/SIGTERM, then stop them in reverse dependency order (`stop_order`)."""
    loop = asyncio.get_running_loop()
    loop.set_default_executor(OrderedExecutor())  # blocking work of the kubelet's pods oldest pod first
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    present: list[tuple[Component, Serve]] = []
    for c in components:
        fn = c.load()
        if fn is None:
            log.warning("%s: not available yet (delivered by %s); running without it", c.name, c.issue)
        else:
            present.append((c, fn))
    if not present:
        log.warning("no components are built yet; waiting for Ctrl-C")
    config_of = {c.name: None if configs is None else configs[c.name] for c, _ in present}

    watchdog: asyncio.Task | None = None
    try:
        async with asyncio.TaskGroup() as tg:
            tasks = []
            readiness = {c.name: asyncio.Event() for c, _ in present}
            for c, fn in present:
                deps = [readiness[a] for a in c.after if a in readiness]
                tasks.append(tg.create_task(_start(c.name, fn, config_of[c.name], readiness[c.name], deps),
                                            name=c.name))
                tg.create_task(_announce(c.name, readiness[c.name]), name=f"{c.name}-ready")
            await stop.wait()
            log.info("stopping: %s", ", ".join(c.name for c, _ in present) or "nothing to stop")
            watchdog = asyncio.create_task(_report_slow_stop(tasks), name="stop-watchdog")
            by_name = dict(zip((c.name for c, _ in present), tasks, strict=True))
            for tier in stop_order([c for c, _ in present]):
                stopping = [by_name[n] for n in tier]
                for t in stopping:
                    t.cancel()
                await asyncio.wait(stopping)
            raise _Stopped
    except* _Stopped:
        pass
    finally:
        if watchdog is not None:
            watchdog.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    log.info("stopped cleanly")
    return 0


def stop_order(components: list[Component]) -> list[list[str]]:
    """Tiers to stop one after another: a component stops only after every component that started
    after it (kubelet before the runtime before the pod network; clients before the apiserver), as
    unit ordering does for kubelet and containerd, so no cleanup races a dependant still at work."""
    names = {c.name for c in components}
    needs = {c.name: {a for a in c.after if a in names} for c in components}
    left, tiers = set(names), []
    while left:
        tier = sorted(n for n in left if not any(n in needs[m] for m in left if m != n))
        if not tier:  # a dependency cycle: stop what is left together
            tier = sorted(left)
        tiers.append(tier)
        left -= set(tier)
    return tiers


class _Stopped(Exception):
    """Raised inside the TaskGroup to cancel its remaining tasks on a stop signal."""


async def _start(name: str, fn: Serve, config: Any, ready: asyncio.Event, deps: list[asyncio.Event]) -> None:
    for dep in deps:
        await dep.wait()
    await fn(config, ready)


async def _report_slow_stop(tasks: list[asyncio.Task]) -> None:
    """A stop that hangs says where: each period, the components still stopping and what they await."""
    every, waited = STOP_REPORT_EVERY, 0.0
    while not all(t.done() for t in tasks):
        await asyncio.sleep(every)
        waited += every
        for t in tasks:
            if not t.done():
                log.warning("%s: still stopping after %.1f s, awaiting %s", t.get_name(),
                            waited, _awaiting(t))


def _awaiting(task: asyncio.Task) -> str:
    """The chain of coroutines a task is suspended in, innermost last (Task.get_stack shows only the
    outermost)."""
    where = []
    coro: Any = task.get_coro()
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            where.append(f"{frame.f_code.co_name} ({frame.f_code.co_filename}:{frame.f_lineno})")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return " -> ".join(where[-4:]) or "?"


async def _announce(name: str, ready: asyncio.Event) -> None:
    await ready.wait()
    log.info("%s: ready", name)
