"""Calling another plugin (the IPAM plugin named by `ipam.type`) exactly as a runtime would.

Our own host-local is stdlib-only and is called in-process: same protocol,
same JSON, no fork+exec. Anything else is found on CNI_PATH and exec'd.
"""

from __future__ import annotations

import json
import os

from cni.errors import DECODE_FAILURE, INTERNAL, CNIError

TYPE_CHECKING = False  # typing is not imported at run time: the exec'd path stays lean
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


IN_PROCESS = {"nodeagent-host-local"}


def find(plugin_type: str, path: list[str]) -> str:
    if "/" in plugin_type:
        raise CNIError(INTERNAL, "invalid plugin type", plugin_type)
    for d in path:
        exe = os.path.join(d, plugin_type)
        if os.access(exe, os.X_OK) and os.path.isfile(exe):
            return exe
    raise CNIError(INTERNAL, f"failed to find plugin {plugin_type!r} in path {path}")


def call(command: str, plugin_type: str, stdin: bytes, env: Mapping[str, str],
         path: list[str]) -> dict[str, Any] | None:
    """Run `plugin_type` for `command`; the ADD result as a dict, None for the other verbs."""
    env2 = dict(env)
    env2["CNI_COMMAND"] = command
    if plugin_type in IN_PROCESS and not env.get("NODEAGENT_CNI_EXEC_IPAM"):
        from cni import skel
        from cni.plugins import host_local

        code, out = skel.dispatch(host_local.HostLocal(), env2, stdin)
    else:
        import subprocess

        exe = find(plugin_type, path)
        env2.setdefault("PATH", os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"))
        p = subprocess.run([exe], input=stdin, env=env2, capture_output=True, check=False)
        code, out = p.returncode, p.stdout
        if code != 0 and not out.strip():
            raise CNIError(INTERNAL, f"{plugin_type} failed ({code})",
                           p.stderr.decode(errors="replace")[-500:])
    data: Any = None
    if out.strip():
        try:
            data = json.loads(out)
        except ValueError as e:
            raise CNIError(DECODE_FAILURE, f"cannot decode {plugin_type} output", str(e)) from None
    if code != 0:
        raise CNIError.from_json(data if isinstance(data, dict) else {"msg": str(data)})
    return data if command == "ADD" else None
