"""The exec'd entry point of every nodeagent CNI plugin when run from Python: stdlib only, lean imports.

bridge (kernel work worth keeping warm) and portmap (in every pod's chain, so an interpreter
start per pod when exec'd) forward the call — the whole environment and stdin, verbatim — to
the resident `nodeagent cni-daemon` over a unix socket when one listens, and otherwise run the
plugin in-process (same code, same answers). host-local is called in-process by bridge.
`make cni-install` puts a compiled C twin of this client (cni/native/cni_client.c) in the CNI
bin dir for both, which saves the interpreter start on the daemon path.
NODEAGENT_CNI_SOCKET names the socket ("none" disables the daemon path).

Wire format: request "NACNI1 <plugin>\\n", "K=V\\0" per variable, "\\0", stdin to EOF;
reply "<exit status>\\n" then the plugin's stdout to EOF.
"""

from __future__ import annotations

import os
import socket
import sys

TYPE_CHECKING = False  # typing is not imported at run time: the exec'd path stays lean
if TYPE_CHECKING:
    from cni.skel import Plugin

DEFAULT_SOCKET = "/run/nodeagent/cni.sock"
VIA_DAEMON = {"bridge", "portmap"}
MAGIC = b"NACNI1"
TRY_AGAIN = b'{"cniVersion":"1.0.0","code":11,"msg":"cni daemon connection failed","details":"%s"}\n'


def _read_stdin() -> bytes:
    if sys.stdin is None or sys.stdin.isatty():
        return b""
    return sys.stdin.buffer.read()


def encode_request(plugin: str, env: dict[str, str], stdin: bytes) -> bytes:
    parts = [MAGIC + b" " + plugin.encode() + b"\n"]
    parts += [f"{k}={v}".encode() + b"\0" for k, v in env.items() if "\0" not in k + v]
    parts += [b"\0", stdin]
    return b"".join(parts)


def decode_request(data: bytes) -> tuple[str, dict[str, str], bytes]:
    """(plugin, env, stdin) from a request; ValueError if it is not one."""
    head, nl, rest = data.partition(b"\n")
    magic, _, plugin = head.partition(b" ")
    if magic != MAGIC or not nl:
        raise ValueError("not a nodeagent CNI request")
    env: dict[str, str] = {}
    while True:
        item, sep, rest = rest.partition(b"\0")
        if not sep:
            raise ValueError("truncated environment")
        if not item:
            break
        k, _, v = item.decode("utf-8", "surrogateescape").partition("=")
        env[k] = v
    return plugin.decode(), env, rest


def via_daemon(path: str, plugin: str, env: dict[str, str], stdin: bytes) -> tuple[int, bytes] | None:
    """(status, stdout) from the daemon, or None when no daemon listens at `path`."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            s.connect(path)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            return None
        s.sendall(encode_request(plugin, env, stdin))
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    except OSError as e:
        return 1, TRY_AGAIN % str(e).encode()
    finally:
        s.close()
    status, nl, out = b"".join(chunks).partition(b"\n")
    if not nl or not status.strip().isdigit():
        return 1, TRY_AGAIN % b"broken reply"
    return int(status), out


def plugin_object(plugin: str) -> Plugin:
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


def main(plugin: str, daemon: bool = True) -> int:
    env = dict(os.environ)
    stdin = _read_stdin()
    reply = None
    if daemon and plugin in VIA_DAEMON and env.get("CNI_COMMAND") not in (None, "VERSION"):
        path = env.get("NODEAGENT_CNI_SOCKET") or DEFAULT_SOCKET
        if path != "none":
            reply = via_daemon(path, plugin, env, stdin)
    if reply is None:
        from cni import skel

        reply = skel.dispatch(plugin_object(plugin), env, stdin)
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
