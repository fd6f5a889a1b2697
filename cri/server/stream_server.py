"""The streaming server behind Exec, Attach and PortForward: websocket, channel.k8s.io protocols.

The CRI verbs only hand out a one-time URL (http://127.0.0.1:<port>/<verb>/<token>); the client
then upgrades it to a websocket speaking Kubernetes' channel protocol ("v5.channel.k8s.io" down to
"channel.k8s.io"): every binary message starts with a channel byte — 0 stdin, 1 stdout, 2 stderr,
3 error (a metav1.Status when the command ends), 4 terminal resize ({"Width","Height"}), and in v5
255 "close" (the client closed stdin). Port forwarding uses "v4.channel.k8s.io"/"portforward.k8s.io":
per port a data channel (2i) and an error channel (2i+1), each opened with the port in 2 bytes
little-endian. The same URLs also take SPDY/3.1 upgrades (and SPDY tunnelled in a websocket for
port-forward): see cri/server/spdy_streams.py.
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
import time
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from cri.runtime.process import spawn_exec
from cri.server import attach
from cri.server import spdy_streams as sp
from cri.server.fdio import make_nonblocking, read_fd, write_fd
from kernel import netns

if TYPE_CHECKING:
    from cri.runtime.service import Runtime

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


def exit_message(code: int) -> str | None:
    """What channel.k8s.io before v4 writes on the error stream (nothing on success)."""
    return None if code == 0 else f"command terminated with non-zero exit code: {code}"


def failure(message: str) -> bytes:
    return json.dumps({"metadata": {}, "status": "Failure", "message": message}).encode()


def connect_in_netns(netns_path: str, port: int) -> socket.socket:
    """A TCP connection to 127.0.0.1:port made inside a pod's network namespace (on a thread of its own
    that switches back: kernel.netns)."""
    return netns.run_in(netns_path, lambda: socket.create_connection(("127.0.0.1", port), timeout=5))


class StreamServer:
    def __init__(self, runtime: Runtime, host: str = "127.0.0.1", port: int = 0) -> None:
        self.runtime = runtime
        self.host, self.port = host, port
        self._pending: dict[str, tuple[float, str, dict[str, Any]]] = {}
        self._runner: web.AppRunner | None = None

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        app = web.Application()
        for kind, handler in (("exec", self._exec), ("attach", self._attach),
                              ("portforward", self._portforward)):
            app.router.add_get(f"/{kind}/{{token}}", handler)
            app.router.add_post(f"/{kind}/{{token}}", handler)  # SPDY clients POST
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]  # the port the kernel chose

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
        if sp.is_spdy_upgrade(request):
            return await self._spdy_remote(request, req, self._spdy_exec)
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
        make_nonblocking(h.stdin, h.stdout, h.stderr)
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
            await asyncio.gather(reader, *pumps, return_exceptions=True)  # unregistered before the fds close
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
                data = await read_fd(fd)
            except OSError:
                return
            if not data:
                return
            if want:
                await send(ch, data)

    async def _client_input(self, ws: web.WebSocketResponse, h) -> None:
        try:
            async for msg in ws:
                frame = attach.client_frame(msg)
                if frame is None:
                    continue
                ch, data = frame[0], frame[1:]
                if ch == STDIN and h.stdin is not None:
                    await write_fd(h.stdin, data)
                elif ch == RESIZE and h.tty:
                    size = json.loads(data or b"{}")
                    rows, cols = int(size.get("Height", 24)), int(size.get("Width", 80))
                    fcntl.ioctl(h.stdout, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
                elif ch == CLOSE and data[:1] == bytes([STDIN]) and h.stdin is not None and not h.tty:
                    os.close(h.stdin)
                    h.stdin = None
        finally:
            if ws.closed:
                h.kill()  # the client went away: so does its command

    # -- attach (output from the container's shim, input into its stdin FIFO: cri/server/attach.py) --
    async def _attach(self, request: web.Request) -> web.StreamResponse:
        req = self._take(request, "attach")
        if sp.is_spdy_upgrade(request):
            return await self._spdy_remote(request, req, self._spdy_attach)
        ws = web.WebSocketResponse(protocols=EXEC_PROTOCOLS, max_msg_size=0)
        await ws.prepare(request)
        c = self.runtime.container(req["container_id"])
        out = attach.Output(c, self.runtime.container_dir(c), self.runtime.output_log(c))
        if not out.available:
            await ws.send_bytes(bytes([ERROR]) + failure("the container has no output to attach to"))
            await ws.close()
            return ws
        await attach.serve_websocket(ws, c, out, self.runtime.container_dir(c), req, exit_status)
        return ws

    # -- port forward ----------------------------------------------------------------------------
    async def _portforward(self, request: web.Request) -> web.StreamResponse:
        req = self._take(request, "portforward")
        if sp.is_spdy_upgrade(request) or sp.wants_tunnel(request):
            return await self._spdy_portforward(request, req)
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
                why = f"failed to connect to localhost:{port} in the pod: {e}"
                await ws.send_bytes(bytes([2 * i + 1]) + why.encode())
                continue
            sock.setblocking(False)
            conns[2 * i] = sock
            tasks.append(asyncio.create_task(self._pf_pump(loop, sock, 2 * i, ws)))
        try:
            async for msg in ws:
                if msg.type != WSMsgType.BINARY or not msg.data:
                    continue
                to = conns.get(msg.data[0])
                if to is not None and len(msg.data) > 1:
                    await loop.sock_sendall(to, msg.data[1:])
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

    # -- SPDY/3.1 --------------------------------------------------------------------------------
    async def _spdy_remote(self, request: web.Request, req: dict[str, Any], run) -> web.StreamResponse:
        """Upgrade, wait for the client's streams, run exec or attach on them, GOAWAY."""
        queue: asyncio.Queue[sp.Stream] = asyncio.Queue()
        accepted = await sp.accept_spdy(request, sp.EXEC_SPDY_PROTOCOLS, "channel.k8s.io", queue.put_nowait)
        if isinstance(accepted, web.Response):
            return accepted
        session, version, resp = accepted
        gone = asyncio.create_task(session.wait_closed())
        try:
            ended, streams = await until_gone(gone, sp.RemoteCommand.wait_for_streams(queue, version, req))
            if ended:
                await until_gone(gone, run(sp.RemoteCommand(session, version, streams), req))
        except TimeoutError:
            log.warning("%s: timed out waiting for the client's streams", request.path)
        finally:
            gone.cancel()
            await session.close()
        return resp

    async def _spdy_exec(self, rc: sp.RemoteCommand, req: dict[str, Any]) -> None:
        c = self.runtime.container(req["container_id"])
        L = c.launch
        creds = self.runtime.creds(c)
        try:
            h = await asyncio.to_thread(spawn_exec, c.pid, req["cmd"], L["env"], L["cwd"], creds,
                                        self.runtime.cgroups.procs_files(c.cgroup), req["stdin"], req["tty"])
        except Exception as e:
            await rc.write_status(failure(str(e)), str(e))
            return
        make_nonblocking(h.stdin, h.stdout, h.stderr)
        names = {STDOUT: "stdout", STDERR: "stderr"}

        async def send(ch: int, data: bytes) -> None:
            await rc.send(names[ch], data)
        outputs = [(h.stdout, STDOUT)] + ([(h.stderr, STDERR)] if h.stderr is not None else [])
        pumps = [asyncio.create_task(self._pump(fd, ch, send, req)) for fd, ch in outputs]
        inputs = []  # resize first: what the client sent before its input is applied before it
        if "resize" in rc.streams:
            inputs.append(asyncio.create_task(sp.pump_resize(rc.streams["resize"], h)))
        if "stdin" in rc.streams:
            inputs.append(asyncio.create_task(sp.pump_stdin(rc.streams["stdin"], h)))
        finished = False
        try:
            await asyncio.gather(*pumps)
            code = await asyncio.to_thread(h.wait)
            finished = True
            await rc.close_output()
            await rc.write_status(exit_status(code), exit_message(code))
        finally:
            if not finished:
                h.kill()  # cancelled: the client is gone
            for t in inputs + pumps:
                t.cancel()
            await asyncio.gather(*inputs, *pumps, return_exceptions=True)  # unregistered before the fds close
            if h.stdin is not None and h.stdin != h.stdout:
                with contextlib.suppress(OSError):
                    os.close(h.stdin)
            for fd, _ in outputs:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if not finished:
                await asyncio.to_thread(h.wait)

    async def _spdy_attach(self, rc: sp.RemoteCommand, req: dict[str, Any]) -> None:
        c = self.runtime.container(req["container_id"])
        out = attach.Output(c, self.runtime.container_dir(c), self.runtime.output_log(c))
        if not out.available:
            message = "the container has no output to attach to"
            await rc.write_status(failure(message), message)
            return
        await attach.serve_spdy(rc, c, out, self.runtime.container_dir(c), req, exit_status, exit_message)

    async def _spdy_portforward(self, request: web.Request, req: dict[str, Any]) -> web.StreamResponse:
        s = self.runtime.sandbox(req["sandbox_id"])
        netns = f"/proc/{s.pid}/ns/net" if s.net_mode != 2 else "/proc/self/ns/net"

        async def connect(port: int) -> socket.socket:
            return await asyncio.to_thread(connect_in_netns, netns, port)
        forwarder: sp.PortForwarder | None = None
        pending: list[sp.Stream] = []

        def on_stream(stream: sp.Stream) -> None:
            if forwarder is None:
                pending.append(stream)
            else:
                forwarder.on_stream(stream)
        if sp.is_spdy_upgrade(request):
            accepted = await sp.accept_spdy(request, sp.PORTFORWARD_SPDY_PROTOCOLS, "portforward.k8s.io",
                                            on_stream)
            if isinstance(accepted, web.Response):
                return accepted
        else:
            accepted = await sp.accept_tunnel(request, sp.PORTFORWARD_SPDY_PROTOCOLS, on_stream)
        session, _version, resp = accepted
        forwarder = sp.PortForwarder(session, connect)
        for stream in pending:
            forwarder.on_stream(stream)
        try:
            await session.wait_closed()  # the client ends port forwarding by closing the connection
        finally:
            await forwarder.close()
            await session.close()
        return resp


async def until_gone(gone: asyncio.Task, work) -> tuple[bool, Any]:
    """Run work until it ends or the client goes away (then it is cancelled): (ended, its result)."""
    task = asyncio.ensure_future(work)
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():  # the client went away first (or we are cancelled): so does the work
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return False, None
    return True, task.result()  # raises what the work raised

