"""ExecSync, and what the streaming server's Exec and Attach sessions take from the runtime: the
credentials a container's processes run with (cri/runtime/spec.py), its FIFOs and its output log
(cri/runtime/core.py)."""

from __future__ import annotations

import asyncio

from cri.runtime import spec
from cri.runtime.core import RuntimeCore, require
from cri.runtime.errors import FailedPrecondition, InvalidArgument
from cri.runtime.process import LaunchError, exec_in
from cri.runtime.state import alive


class ExecVerbs(RuntimeCore):
    creds = staticmethod(spec.creds)

    async def exec_sync(self, cid: str, cmd: list[str], timeout_s: int) -> tuple[int, bytes, bytes]:
        c = self.container(cid)
        if not cmd:
            raise InvalidArgument("cmd is required")
        require(c.state.can_exec() and alive(c.pid, c.pid_start), f"container {c.id} is not running")
        L = c.launch
        creds = self.creds(c)
        self._warm_cgroup_attach()
        try:
            r = await asyncio.to_thread(exec_in, c.pid, cmd, L["env"], L["cwd"], creds,
                                        self.cgroups.procs_files(c.cgroup), timeout_s or None)
        except LaunchError as e:
            raise FailedPrecondition(str(e)) from e
        if r.timed_out:
            raise TimeoutError(f"command {cmd!r} timed out after {timeout_s}s")
        return r.exit_code, r.stdout, r.stderr
