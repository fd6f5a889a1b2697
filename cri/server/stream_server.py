"""The streaming server behind Exec, Attach and PortForward: websocket, channel.k8s.io protocols.

The CRI verbs only hand out a one-time URL (http://127.0.0.1:<port>/<verb>/<token>); the client
then upgrades it to a websocket speaking Kubernetes' channel protocol ("v5.channel.k8s.io" down to
"channel.k8s.io"): every binary message starts with a channel byte — 0 stdin, 1 stdout, 2 stderr,
3 error (a metav1.Status when the command ends), 4 terminal resize ({"Width","Height"}), and in v5
255 "close" (the client closed stdin). Port forwarding uses "v4.channel.k8s.io"/"portforward.k8s.io":
per port a data channel (2i) and an error channel (2i+1), each opened with the port in 2 bytes
little-endian. SPDY (what older crictl and kubelet proxies speak) is not implemented.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import secrets
import socket
import struct
import termios
import threading
import time
from typing import Any

from aiohttp import WSMsgType, web

from cri.runtime import syscalls as sc
from cri.runtime.process import spawn_exec

log = logging.getLogger("nodeagent.cri.stream")

EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io",
                  "channel.k8s.io")
PORTFORWARD_PROTOCOLS = ("v4.channel.k8s.io", "portforward.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
TOKEN_TTL = 60.0


def exit_status(code: int) -> bytes:
    if code == 0:
        return json.dumps({"metadata": {}, "status": "Success"}).encode()
    return json.dumps({"metadata": {}, "status": "Failure",
                       "message": f"command terminated with non-zero exit code: {code}",
                       "reason": "NonZeroExitCode",
                       "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}).encode()


def failure(message: str) -> bytes:
    return json.dumps({"metadata": {}, "status": "Failure", "message": message}).encode()


def connect_in_netns(netns_path: str, port: int) -> socket.socket:
    """A TCP connection to 127.0.0.1:port made inside a pod's network namespace.

    setns happens on a dedicated thread that switches back before it ends, never on a shared one."""
    result: dict[str, Any] = {}

    def work() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        target = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            sc.setns(target, sc.CLONE_NEWNET)
            try:
                result["sock"] = socket.create_connection(("127.0.0.1", port), timeout=5)
            finally:
                sc.setns(own, sc.CLONE_NEWNET)
        except BaseException as e:  # reported to the caller
            result["error"] = e
        finally:
            os.close(own)
            os.close(target)

    t = threading.Thread(target=work, name=f"netns-connect-{port}")
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]
    return result["sock"]


class StreamServer:
    def __init__(self, runtime: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.runtime = runtime
        self.host, self.port = host, port
        self._pending: dict[str, tuple[float, str, dict[str, Any]]] = {}
        self._runner: web.AppRunner | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/exec/{token}", self._exec)
        app.router.add_get("/attach/{token}", self._attach)
        app.router.add_get("/portforward/{token}", self._portforward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # the port the kernel chose

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # -- one-time URLs ---------------------------------------------------------------------------
    def register(self, kind: str, request: dict[str, Any]) -> str:
        now = time.monotonic()
        for t in [t for t, (at, _, _) in self._pending.items() if now - at > TOKEN_TTL]:
            del self._pending[t]
        token = secrets.token_urlsafe(12)
        self._pending[token] = (now, kind, request)
        return f"http://{self.host}:{self.port}/{kind}/{token}"

    def _take(self, request: web.Request, kind: str) -> dict[str, Any]:
        entry = self._pending.pop(request.match_info["token"], None)
        if entry is None or entry[1] != kind or time.monotonic() - entry[0] > TOKEN_TTL:
            raise web.HTTPNotFound(text="unknown or expired streaming token")
        return entry[2]

    # -- exec ------------------------------------------------------------------------------------
    async def _exec(self, request: web.Request) -> web.StreamResponse:
        req = self._take(request, "exec")
        ws = web.WebSocketResponse(protocols=EXEC_PROTOCOLS, max_msg_size=0)
        await ws.prepare(request)
        c = self.runtime.container(req["container_id"])
        L = c.launch
        creds = self.runtime.creds(c)
        try:
            h = await asyncio.to_thread(spawn_exec, c.pid, req["cmd"], L["env"], L["cwd"], creds,
                                        self.runtime.cgroups.procs_files(c.cgroup), req["stdin"], req["tty"])
        except Exception as e:
            await ws.send_bytes(bytes([ERROR]) + failure(str(e)))
            await ws.close()
            return ws
        send_lock = asyncio.Lock()

        async def send(ch: int, data: bytes) -> None:
            async with send_lock:
                if not ws.closed:
                    await ws.send_bytes(bytes([ch]) + data)

        for ch, want in ((STDOUT, req["stdout"]), (STDERR, req["stderr"] and not req["tty"])):
            if want:
                await send(ch, b"")
        outputs = [(h.stdout, STDOUT)] + ([(h.stderr, STDERR)] if h.stderr is not None else [])
        pumps = [asyncio.create_task(self._pump(fd, ch, send, req)) for fd, ch in outputs]
        reader = asyncio.create_task(self._client_input(ws, h))
        try:
            await asyncio.gather(*pumps)
            code = await asyncio.to_thread(h.wait)
            await send(ERROR, exit_status(code))
        finally:
            reader.cancel()
            for p in pumps:
                p.cancel()
            if h.stdin is not None and h.stdin != h.stdout:
                with contextlib.suppress(OSError):
                    os.close(h.stdin)
            for fd, _ in outputs:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if not ws.closed:
                await ws.close()
        return ws

    async def _pump(self, fd: int, ch: int, send, req: dict[str, Any]) -> None:
        want = req["stdout"] if ch == STDOUT else req["stderr"]
        while True:
            try:
                data = await asyncio.to_thread(os.read, fd, 65536)
            except OSError:  # EIO from a pty master once the command is gone
                return
            if not data:
                return
            if want:
                await send(ch, data)

    async def _client_input(self, ws: web.WebSocketResponse, h) -> None:
        try:
            async for msg in ws:
                if msg.type != WSMsgType.BINARY or not msg.data:
                    continue
                ch, data = msg.data[0], msg.data[1:]
                if ch == STDIN and h.stdin is not None:
                    await asyncio.to_thread(os.write, h.stdin, data)
                elif ch == RESIZE and h.tty:
                    size = json.loads(data or b"{}")
                    fcntl.ioctl(h.stdout, termios.TIOCSWINSZ,
                                struct.pack("HHHH", int(size.get("Height", 24)), int(size.get("Width", 80)), 0, 0))
                elif ch == CLOSE and data[:1] == bytes([STDIN]) and h.stdin is not None and not h.tty:
                    os.close(h.stdin)
                    h.stdin = None
        finally:
            if ws.closed:
                h.kill()  # the client went away: so does its command

    # -- attach (output only: the shim owns the container's stdio and writes it to the log) -------
    async def _attach(self, request: web.Request) -> web.StreamResponse:
        req = self._take(request, "attach")
        ws = web.WebSocketResponse(protocols=EXEC_PROTOCOLS)
        await ws.prepare(request)
        c = self.runtime.container(req["container_id"])
        log_path = c.log_path or c.launch.get("output_log", "")
        if not log_path:
            await ws.send_bytes(bytes([ERROR]) + failure("the container has no log to attach to"))
            await ws.close()
            return ws
        for ch, want in ((STDOUT, req["stdout"]), (STDERR, req["stderr"])):
            if want:
                await ws.send_bytes(bytes([ch]))
        feeder = None
        if req.get("stdin") and c.launch.get("stdin"):
            feeder = asyncio.create_task(self._attach_stdin(ws, c.launch["stdin"]))
        try:
            await self._follow_log(ws, c, req, log_path)
        finally:
            if feeder:
                feeder.cancel()
        return ws

    async def _attach_stdin(self, ws: web.WebSocketResponse, fifo: str) -> None:
        """Client stdin (channel 0) into the container's stdin FIFO, until the client closes it."""
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return  # the container is gone (no reader)
        os.set_blocking(fd, True)
        try:
            async for msg in ws:
                if msg.type != WSMsgType.BINARY or not msg.data:
                    continue
                if msg.data[0] == CLOSE:
                    break
                if msg.data[0] == STDIN and len(msg.data) > 1:
                    await asyncio.to_thread(os.write, fd, msg.data[1:])
        finally:
            os.close(fd)

    async def _follow_log(self, ws: web.WebSocketResponse, c: Any, req: dict, log_path: str) -> None:
        with open(log_path, "rb") as f:  # noqa: ASYNC230 - a local log file, read in small steps
            f.seek(0, os.SEEK_END)
            pending = b""
            while not ws.closed:
                chunk = f.read(65536)
                if not chunk:
                    if c.state != "RUNNING":
                        break
                    await asyncio.sleep(0.05)
                    continue
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    parts = line.split(b" ", 3)
                    if len(parts) < 4:
                        continue
                    stream, tag, text = parts[1], parts[2], parts[3]
                    ch = STDOUT if stream == b"stdout" else STDERR
                    if (ch == STDOUT and req["stdout"]) or (ch == STDERR and req["stderr"]):
                        await ws.send_bytes(bytes([ch]) + text + (b"\n" if tag == b"F" else b""))
        if not ws.closed:
            await ws.send_bytes(bytes([ERROR]) + exit_status(c.exit_code))
            await ws.close()

    # -- port forward ----------------------------------------------------------------------------
    async def _portforward(self, request: web.Request) -> web.StreamResponse:
        req = self._take(request, "portforward")
        ports = [int(p) for p in request.query.getall("port", [])] or list(req["ports"])
        ws = web.WebSocketResponse(protocols=PORTFORWARD_PROTOCOLS, max_msg_size=0)
        await ws.prepare(request)
        s = self.runtime.sandbox(req["sandbox_id"])
        netns = f"/proc/{s.pid}/ns/net" if s.net_mode != 2 else "/proc/self/ns/net"
        loop = asyncio.get_running_loop()
        conns: dict[int, socket.socket] = {}
        tasks = []
        for i, port in enumerate(ports):
            for ch in (2 * i, 2 * i + 1):
                await ws.send_bytes(bytes([ch]) + struct.pack("<H", port))
            try:
                sock = await asyncio.to_thread(connect_in_netns, netns, port)
            except OSError as e:
                await ws.send_bytes(bytes([2 * i + 1]) + f"failed to connect to localhost:{port} in the pod: {e}".encode())
                continue
            sock.setblocking(False)
            conns[2 * i] = sock
            tasks.append(asyncio.create_task(self._pf_pump(loop, sock, 2 * i, ws)))
        try:
            async for msg in ws:
                if msg.type != WSMsgType.BINARY or not msg.data:
                    continue
                sock = conns.get(msg.data[0])
                if sock is not None and len(msg.data) > 1:
                    await loop.sock_sendall(sock, msg.data[1:])
        finally:
            for t in tasks:
                t.cancel()
            for sock in conns.values():
                sock.close()
        return ws

    async def _pf_pump(self, loop, sock: socket.socket, ch: int, ws: web.WebSocketResponse) -> None:
        while True:
            data = await loop.sock_recv(sock, 65536)
            if not data:
                await ws.close()
                return
            await ws.send_bytes(bytes([ch]) + data)
