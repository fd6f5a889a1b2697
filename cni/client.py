"""The exec'd entry point of every nodeagent CNI plugin: stdlib only, so it starts in ~10 ms.

bridge (the only plugin that needs pyroute2) forwards the call — env and stdin,
verbatim — to the resident `nodeagent cni-daemon` over a unix socket when one
is listening, and otherwise runs the plugin in-process (the slow but complete
fallback). host-local and portmap are stdlib-only and always run in-process.
NODEAGENT_CNI_SOCKET names the socket ("none" disables the daemon path).
"""

from __future__ import annotations

import json
import os
import socket
import sys

DEFAULT_SOCKET = "/run/nodeagent/cni.sock"
VIA_DAEMON = {"bridge"}
TRY_AGAIN = 11


def _read_stdin() -> bytes:
    if sys.stdin is None or sys.stdin.isatty():
        return b""
    return sys.stdin.buffer.read()


def via_daemon(path: str, plugin: str, env: dict[str, str], stdin: bytes) -> tuple[int, bytes] | None:
    """(status, stdout) from the daemon, or None when no daemon listens at `path`."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            s.connect(path)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            return None
        s.sendall(json.dumps({"plugin": plugin, "env": env, "stdin": stdin.decode("utf-8", "replace")}).encode())
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    except OSError as e:
        msg = {"cniVersion": "1.0.0", "code": TRY_AGAIN, "msg": "cni daemon connection failed", "details": str(e)}
        return 1, json.dumps(msg).encode() + b"\n"
    finally:
        s.close()
    try:
        reply = json.loads(b"".join(chunks))
        return int(reply["code"]), reply["stdout"].encode()
    except (ValueError, KeyError):
        msg = {"cniVersion": "1.0.0", "code": TRY_AGAIN, "msg": "cni daemon sent a broken reply"}
        return 1, json.dumps(msg).encode() + b"\n"


def plugin_object(plugin: str) -> object:
    if plugin == "bridge":
        from cni.plugins.bridge import Bridge

        return Bridge()
    if plugin == "host-local":
        from cni.plugins.host_local import HostLocal

        return HostLocal()
    if plugin == "portmap":
        from cni.plugins.portmap import Portmap

        return Portmap()
    raise ValueError(plugin)


def main(plugin: str) -> int:
    env = dict(os.environ)
    stdin = _read_stdin()
    reply = None
    if plugin in VIA_DAEMON and env.get("CNI_COMMAND") not in (None, "VERSION"):
        path = env.get("NODEAGENT_CNI_SOCKET") or DEFAULT_SOCKET
        if path != "none":
            reply = via_daemon(path, plugin, env, stdin)
    if reply is None:
        from cni import skel

        reply = skel.dispatch(plugin_object(plugin), env, stdin)  # type: ignore[arg-type]
    code, out = reply
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    return code


def bridge() -> int:
    return main("bridge")


def host_local() -> int:
    return main("host-local")


def portmap() -> int:
    return main("portmap")
