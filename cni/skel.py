"""The CNI protocol shell: the only code that reads CNI_* variables, stdin and stdout.

`dispatch(plugin, env, stdin)` is pure (env and stdin are passed in, the JSON
answer comes back), so tests and the resident daemon drive plugins without
exec; `main(plugin)` binds it to the real process. Plugins get a parsed
`CmdArgs` and return a result or raise `CNIError`; anything else is code 999.
"""

from __future__ import annotations

import json
import os
import re
import sys

from cni import version as ver
from cni.errors import (
    DECODE_FAILURE,
    INCOMPATIBLE_VERSION,
    INTERNAL,
    INVALID_CONFIG,
    INVALID_ENV,
    CNIError,
)

TYPE_CHECKING = False  # typing is not imported at run time: the exec'd path stays lean
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Protocol

    class Plugin(Protocol):
        def add(self, a: CmdArgs) -> dict[str, Any]: ...
        def delete(self, a: CmdArgs) -> None: ...
        def check(self, a: CmdArgs) -> None: ...
        def gc(self, a: CmdArgs) -> None: ...
        def status(self, a: CmdArgs) -> None: ...

_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$")
_NEEDS = {
    "ADD": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"),
    "CHECK": ("CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"),
    "DEL": ("CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"),
    "GC": ("CNI_PATH",),
    "STATUS": ("CNI_PATH",),
    "VERSION": (),
}


class CmdArgs:
    """One invocation, parsed: the env the runtime set and the network config it sent."""

    __slots__ = ("command", "container_id", "netns", "ifname", "args", "path", "config", "stdin", "env")

    def __init__(self, command: str, container_id: str, netns: str, ifname: str, args: dict[str, str],
                 path: list[str], config: dict[str, Any], stdin: bytes,
                 env: Mapping[str, str] | None = None) -> None:
        self.command = command
        self.container_id = container_id
        self.netns = netns
        self.ifname = ifname
        self.args = args
        self.path = path
        self.config = config
        self.stdin = stdin
        self.env = env if env is not None else {}

    @property
    def version(self) -> str:
        return str(self.config.get("cniVersion", ""))

    @property
    def name(self) -> str:
        return str(self.config.get("name", ""))


def parse_cni_args(raw: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in filter(None, raw.split(";")):
        k, sep, v = part.partition("=")
        if not sep or not k:
            raise CNIError(INVALID_ENV, "invalid CNI_ARGS", raw)
        out[k] = v
    return out


def validate_ifname(name: str) -> None:
    if not name or len(name) > 15 or name in (".", "..") or any(c in name for c in "/: \t\n"):
        raise CNIError(INVALID_ENV, "invalid CNI_IFNAME", name)


def _config(stdin: bytes) -> dict[str, Any]:
    try:
        cfg = json.loads(stdin or b"{}")
    except (ValueError, UnicodeDecodeError) as e:
        raise CNIError(DECODE_FAILURE, "failed to decode network configuration", str(e)) from None
    if not isinstance(cfg, dict):
        raise CNIError(DECODE_FAILURE, "network configuration is not a JSON object")
    return cfg


def _check_version(cfg: dict[str, Any], supported: tuple[str, ...]) -> str:
    v = cfg.get("cniVersion") or "0.1.0"
    if not isinstance(v, str) or v not in supported:
        raise CNIError(INCOMPATIBLE_VERSION, "incompatible CNI versions",
                       f"config is {v!r}, plugin supports {list(supported)}")
    return v


def parse(env: Mapping[str, str], stdin: bytes, supported: tuple[str, ...] = ver.SUPPORTED) -> CmdArgs:
    """Validate env and config in the order the spec's callers expect; raise CNIError on the first fault."""
    cmd = env.get("CNI_COMMAND", "")
    if not cmd:
        raise CNIError(INVALID_ENV, "required env variables [CNI_COMMAND] missing")
    if cmd not in _NEEDS:
        raise CNIError(INVALID_ENV, f"unknown CNI_COMMAND: {cmd}")
    missing = [k for k in _NEEDS[cmd] if not env.get(k)]
    if missing:
        raise CNIError(INVALID_ENV, f"required env variables [{','.join(missing)}] missing")
    cfg = _config(stdin)
    if cmd == "VERSION":
        return CmdArgs(cmd, "", "", "", {}, [], cfg, stdin, env)
    v = _check_version(cfg, supported)
    if cmd in ("GC", "STATUS") and not ver.at_least(v, "1.1.0"):
        raise CNIError(INCOMPATIBLE_VERSION, f"config version {v} does not allow {cmd}")
    if not _NAME_RE.match(str(cfg.get("name", ""))):
        raise CNIError(INVALID_CONFIG, "invalid network name", str(cfg.get("name", "")))
    cid = env.get("CNI_CONTAINERID", "")
    if cmd in ("ADD", "DEL", "CHECK"):
        if not _NAME_RE.match(cid):
            raise CNIError(INVALID_ENV, "invalid characters in containerID", cid)
        validate_ifname(env.get("CNI_IFNAME", ""))
    return CmdArgs(
        command=cmd,
        container_id=cid,
        netns=env.get("CNI_NETNS", ""),
        ifname=env.get("CNI_IFNAME", ""),
        args=parse_cni_args(env.get("CNI_ARGS", "")),
        path=[p for p in env.get("CNI_PATH", "").split(os.pathsep) if p],
        config=cfg,
        stdin=stdin,
        env=env,
    )


def dispatch(plugin: Plugin, env: Mapping[str, str], stdin: bytes,
             supported: tuple[str, ...] = ver.SUPPORTED) -> tuple[int, bytes]:
    """Run one verb; return (exit status, stdout bytes). Never raises."""
    reply_version = ver.LATEST
    try:
        a = parse(env, stdin, supported)
        if a.version in supported:
            reply_version = a.version
        if a.command == "VERSION":
            return 0, _dump({"cniVersion": reply_version, "supportedVersions": list(supported)})
        if a.command == "ADD":
            return 0, _dump(ver.convert_result(plugin.add(a), a.version))
        {"DEL": plugin.delete, "CHECK": plugin.check, "GC": plugin.gc, "STATUS": plugin.status}[a.command](a)
        return 0, b""
    except CNIError as e:
        return 1, _dump(e.to_json(reply_version))
    except Exception as e:  # the boundary: every unexpected failure is the spec's internal error
        err = CNIError(INTERNAL, "internal error", f"{type(e).__name__}: {e}")
        return 1, _dump(err.to_json(reply_version))


def _dump(obj: Any) -> bytes:
    return (json.dumps(obj, indent=None, separators=(",", ":")) + "\n").encode()


def main(plugin: Plugin) -> int:
    """Bind `dispatch` to this process's environment, stdin and stdout."""
    stdin = b"" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.buffer.read()
    code, out = dispatch(plugin, os.environ, stdin)
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    return code
