"""Start-up: recover sandboxes and containers from their records on disk and reconcile them with the
kernel before serving. A pause or shim that is gone marks its sandbox NOTREADY or its container EXITED
(from the exit file the shim left); a record half-made before a crash, or a container whose sandbox is
gone, is removed, never reported."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
from pathlib import Path

from cri.runtime.core import RuntimeCore, remove_tree, remove_unmounted
from cri.runtime.state import ContainerRecord, SandboxRecord, SandboxState, alive, load
from kernel import syscalls as sc

log = logging.getLogger("nodeagent.cri.runtime")


class Recovery(RuntimeCore):
    async def start(self) -> None:
        await asyncio.to_thread(_empty_dir, self.opts.state_dir / "trash")
        for d in sorted((self.opts.state_dir / "sandboxes").iterdir()):
            s = load(d / "sandbox.json", SandboxRecord)
            if s is None:
                await asyncio.to_thread(remove_unmounted, d)  # half-made before a crash (its shm too)
                continue
            self.sandboxes[s.id] = s
            self._keys[s.key] = s.id
            if s.state.can_exit():
                if alive(s.pid, s.pid_start):
                    self._watch(s.pid, functools.partial(self._on_pause_exit, s))
                else:
                    s.state = SandboxState.NOTREADY
                    self._persist_sandbox(s)
        for d in sorted((self.opts.state_dir / "containers").iterdir()):
            c = load(d / "container.json", ContainerRecord)
            if c is None or c.sandbox_id not in self.sandboxes:
                await asyncio.to_thread(_cleanup_orphan_container_dir, d)
                continue
            self.containers[c.id] = c
            self._keys[c.key] = c.id
            self._exited[c.id] = asyncio.Event()
            if c.state.can_exit():
                if alive(c.shim_pid, c.shim_start):
                    self._watch(c.shim_pid, functools.partial(self._on_container_exit, c))
                else:
                    self._on_container_exit(c)
            elif c.state.has_exited():
                self._exited[c.id].set()
        log.info("recovered %d sandboxes and %d containers", len(self.sandboxes), len(self.containers))


def _cleanup_orphan_container_dir(d: Path) -> None:
    rootfs = d / "rootfs"
    with contextlib.suppress(OSError):
        if os.path.ismount(rootfs):
            sc.umount(str(rootfs), sc.MNT_DETACH)
    remove_tree(d)


def _empty_dir(d: Path) -> None:
    for p in d.iterdir():
        remove_tree(p)
