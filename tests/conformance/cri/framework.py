"""The pieces critest's specs share (its pkg/framework, re-done for pytest): image names, default
sandbox/container configs, the "Eventually" waits, CRI log parsing, and a channel.k8s.io client for the
streaming specs. One `Spec` per test: it remembers what the test made and removes it afterwards.

Everything goes through the project's CRI client (cri/client/), so the very same test runs against
our runtime and against Debian's containerd.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import shutil
import struct
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from cri.client import CRIClient
from cri.proto import api_pb2 as pb

# -- the images critest uses, under the same names (served by a local registry through mirrors) -----
E2E = "registry.k8s.io/e2e-test-images/"
STAGING = "gcr.io/k8s-staging-cri-tools/"
BUSYBOX = E2E + "busybox:1.29-2"  # framework's DefaultTestContainerImage
PAUSE = "registry.k8s.io/pause:3.9"  # framework's DefaultPauseImage (CreatePauseContainer)
WEBSERVER = E2E + "nginx:1.14-2"
HTTPD = E2E + "httpd:2.4.39-4"
HOST_NET_WEBSERVER = STAGING + "hostnet-nginx-amd64"
NONEWPRIVS = E2E + "nonewprivs:1.3"
IMAGE_WITHOUT_TAG = STAGING + "test-image-latest"
IMAGE_WITH_TAG = STAGING + "test-image-tag:test"
IMAGE_DIGEST_REPO = STAGING + "test-image-digest"  # pulled by the digest of the image we built
IMAGE_ALL_REFERENCES = STAGING + "test-image-tag:all"
DIFFERENT_TAG_DIFFERENT_IMAGE = [STAGING + f"test-image-{i}:latest" for i in (1, 2, 3)]
DIFFERENT_TAG_SAME_IMAGE = [STAGING + f"test-image-tags:{i}" for i in (1, 2, 3)]
IMAGE_USER_UID, IMAGE_USER_UID_VALUE = STAGING + "test-image-user-uid", 1002
IMAGE_USER_USERNAME, IMAGE_USER_USERNAME_VALUE = STAGING + "test-image-user-username", "www-data"
IMAGE_USER_UID_GROUP, IMAGE_USER_UID_GROUP_VALUE = STAGING + "test-image-user-uid-group", 1003
IMAGE_USER_USERNAME_GROUP = STAGING + "test-image-user-username-group"

# -- consts.go --------------------------------------------------------------------------------
DEFAULT_LOG = "hello World"
ECHO_HELLO_CMD = ["echo", "-n", "hello"]
ATTACH_ECHO_HELLO = " ".join(ECHO_HELLO_CMD).encode()  # what checkAttach writes to an attached shell
SLEEP_CMD = ["sleep", "4321"]
CHECK_SLEEP_CMD = ["sh", "-c", "pgrep sleep || true"]
SHELL_CMD = ["/bin/sh"]
PAUSE_CMD = ["sh", "-c", "top"]
LOG_DEFAULT_CMD = ["echo", DEFAULT_LOG]
LOOP_LOG_DEFAULT_CMD = ["sh", "-c", f"while true; do echo {DEFAULT_LOG}; sleep 1; done"]
DEFAULT_CONTAINER_CMD = ["/bin/sh", "-c", "top"]
DNS_SERVER, DNS_SEARCH, DNS_OPTION = "10.10.10.10", "google.com", "ndots:8"
WEB_PORT = 80
HOST_PORT_FOR_PORT_MAPPING = 12000
HOST_PORT_FOR_PORT_FORWARD = 12001
HOST_NET_WEB_PORT = 12003  # the port hostnet-nginx listens on
EXEC_TIMEOUT = 30
STOP_TIMEOUT = 60
DEFAULT_POD_LABELS = {"io.kubernetes.pod.name": "critest", "io.kubernetes.pod.namespace": "critest"}


def new_uuid() -> str:
    return str(uuid.uuid4())


def eventually(fn: Callable[[], Any], ok: Callable[[Any], bool], timeout: float = 60.0,
               interval: float = 0.2) -> Any:
    """Gomega's Eventually: poll until `ok(fn())`; returns the last value (the caller asserts on it)."""
    end = time.monotonic() + timeout
    while True:
        try:
            v = fn()
        except Exception:
            if time.monotonic() > end:
                raise
            v = None
        else:
            if ok(v):
                return v
        if time.monotonic() > end:
            return v
        time.sleep(interval)


class ExecError(Exception):
    """What critest's ExecSync wrapper reports: a gRPC error or a non-zero exit code."""

    def __init__(self, msg: str, stdout: bytes = b"", stderr: bytes = b"", code: int | None = None):
        super().__init__(msg)
        self.stdout, self.stderr, self.code = stdout, stderr, code


class LogMessage:
    def __init__(self, ts: datetime.datetime, stream: str, log: str) -> None:
        self.timestamp, self.stream, self.log = ts, stream, log

    def __repr__(self) -> str:
        return f"({self.stream} {self.log!r})"


def parse_cri_log(line: str) -> LogMessage:
    """`<RFC3339Nano> <stream> <P|F> <content>`: the timestamp must parse, the tag is skipped."""
    parts = line.split(" ", 3)
    assert len(parts) == 4, f"invalid CRI log line {line!r}"
    ts = parts[0]
    # Python's fromisoformat takes at most 6 fractional digits: trim nanoseconds, keep the zone
    head, _, frac = ts.partition(".")
    if frac:
        digits = "".join(ch for ch in frac if ch.isdigit())
        zone = frac[len(digits):]
        ts = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    parsed = datetime.datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return LogMessage(parsed, parts[1], parts[3] + "\n")


def parse_log_file(path: Path) -> list[LogMessage]:
    return [parse_cri_log(line) for line in path.read_text().splitlines() if line]


class Spec:
    """One spec's view of a runtime: the client plus what to clean up when the spec ends."""

    def __init__(self, runtime: Any, tmp: Path) -> None:
        self.runtime = runtime
        self.name: str = runtime.name
        self.c: CRIClient = runtime.client
        self.tmp = tmp
        self.sandboxes: list[str] = []
        self.parents: list[str] = []
        self.cleanups: list[Callable[[], None]] = []

    # -- sandboxes ------------------------------------------------------------------------------
    def pod_config(self, prefix: str = "PodSandbox-", *, log_dir: str = "",
                   labels: dict | None = None) -> pb.PodSandboxConfig:
        from tests.harness.resources import unique

        name = prefix + new_uuid()
        cfg = pb.PodSandboxConfig(log_directory=log_dir)
        cfg.metadata.name, cfg.metadata.uid = name, "uid-" + new_uuid()
        cfg.metadata.namespace, cfg.metadata.attempt = "namespace-" + new_uuid(), 0
        cfg.labels.update(DEFAULT_POD_LABELS if labels is None else labels)
        parent = "/" + unique("crit")
        self.parents.append(parent)
        cfg.linux.cgroup_parent = parent
        return cfg

    def run_pod(self, cfg: pb.PodSandboxConfig) -> str:
        sid = self.c.run_pod_sandbox(cfg)
        self.sandboxes.append(sid)
        return sid

    def run_default_pod(self, prefix: str = "PodSandbox-") -> str:
        return self.run_pod(self.pod_config(prefix))

    def pod_for_container(self) -> tuple[str, pb.PodSandboxConfig]:
        cfg = self.pod_config("PodSandbox-for-create-container-")
        return self.run_pod(cfg), cfg

    def log_dir(self, pod_name: str) -> str:
        d = Path(tempfile.mkdtemp(prefix="podLogTest", dir=self.tmp)) / pod_name
        d.mkdir(parents=True, mode=0o777)
        return str(d)

    def pod_with_log_directory(self) -> tuple[str, pb.PodSandboxConfig]:
        name = "PodSandbox-with-log-directory-" + new_uuid()
        cfg = self.pod_config(log_dir=self.log_dir(name))
        cfg.metadata.name = name
        return self.run_pod(cfg), cfg

    def pod_status(self, sid: str) -> pb.PodSandboxStatus:
        return self.c.pod_sandbox_status(sid).status

    def list_pods(self, **filt: Any) -> list[pb.PodSandbox]:
        return self.c.list_pod_sandbox(**filt)

    # -- containers -----------------------------------------------------------------------------
    def ensure_image(self, image: str) -> None:
        """framework.CreateContainer: pull the image when the runtime does not have it yet."""
        ref = image if (":" in image.rsplit("/", 1)[-1] or "@" in image) else image + ":latest"
        if not self.image_status(ref):
            self.pull(ref)

    def create(self, sid: str, pod: pb.PodSandboxConfig, cfg: pb.ContainerConfig) -> str:
        self.ensure_image(cfg.image.image)
        return self.c.create_container(sid, cfg, pod)

    def container_config(self, prefix: str, image: str = BUSYBOX, command: list[str] | None = None,
                         **kw: Any) -> pb.ContainerConfig:
        cfg = pb.ContainerConfig(command=command or [], **kw)
        cfg.metadata.name, cfg.metadata.attempt = prefix + new_uuid(), 0
        cfg.image.image = image
        return cfg

    def create_default(self, sid: str, pod: pb.PodSandboxConfig, prefix: str,
                       labels: dict | None = None) -> str:
        cfg = self.container_config(prefix, command=DEFAULT_CONTAINER_CMD)
        cfg.labels.update(labels or {})
        cfg.linux.SetInParent()
        return self.create(sid, pod, cfg)

    def create_pause(self, sid: str, pod: pb.PodSandboxConfig, prefix: str) -> str:
        return self.create(sid, pod, self.container_config(prefix, image=PAUSE))

    def start(self, cid: str) -> None:
        self.c.start_container(cid)

    def status(self, cid: str) -> pb.ContainerStatus:
        return self.c.container_status(cid).status

    def wait_state(self, cid: str, state: int, timeout: float = 60.0) -> pb.ContainerStatus:
        st = eventually(lambda: self.status(cid), lambda s: s.state == state, timeout)
        assert st.state == state, f"container {cid} is {pb.ContainerState.Name(st.state)}, " \
                                  f"want {pb.ContainerState.Name(state)}"
        return st

    def start_running(self, cid: str) -> None:
        """testStartContainer: start, then it must be RUNNING."""
        self.start(cid)
        self.wait_state(cid, pb.CONTAINER_RUNNING)

    def stop_exited(self, cid: str) -> None:
        """testStopContainer: stop (within its timeout), then it must be EXITED."""
        t0 = time.monotonic()
        self.c.stop_container(cid, STOP_TIMEOUT)
        assert time.monotonic() - t0 < STOP_TIMEOUT, "stop container timed out"
        self.wait_state(cid, pb.CONTAINER_EXITED)

    def list_containers(self, **filt: Any) -> list[pb.Container]:
        return self.c.list_containers(**filt)

    def exec_sync(self, cid: str, cmd: list[str], timeout: int = EXEC_TIMEOUT) -> tuple[bytes, bytes]:
        try:
            r = self.c.exec_sync(cid, cmd, timeout)
        except grpc.RpcError as e:
            raise ExecError(f"ExecSync {cmd}: {e.code().name}: {e.details()}") from None
        if r.exit_code != 0:
            raise ExecError(f"command {cmd} exited with {r.exit_code}: {r.stderr!r}", r.stdout, r.stderr,
                            r.exit_code)
        return r.stdout, r.stderr

    def exec_ok(self, cid: str, cmd: list[str]) -> str:
        """execSyncContainer: must succeed with an empty stderr; returns stdout."""
        out, err = self.exec_sync(cid, cmd)
        assert err.decode() == "", f"stderr of {cmd} should be empty: {err!r}"
        return out.decode()

    def log_messages(self, pod: pb.PodSandboxConfig, log_path: str) -> list[LogMessage]:
        return parse_log_file(Path(pod.log_directory) / log_path)

    def verify_log(self, pod: pb.PodSandboxConfig, log_path: str, line: str, stream: str) -> None:
        msgs = eventually(lambda: self.log_messages(pod, log_path),
                          lambda ms: any(m.log == line and m.stream == stream for m in ms), 10)
        assert any(m.log == line and m.stream == stream for m in msgs or []), \
            f"expected log {line!r} ({stream}) not found in {msgs}"

    # -- images ---------------------------------------------------------------------------------
    def pull(self, image: str, timeout: float | None = None) -> str:
        return self.c.pull_image(image, sandbox_config=pb.PodSandboxConfig(labels=DEFAULT_POD_LABELS),
                                 deadline=timeout or 120)

    def image_status(self, image: str) -> pb.Image | None:
        r = self.c.image_status(image)
        return r.image if r.HasField("image") else None

    def remove_image(self, image: str) -> None:
        """critest's removeImage: by the ID ImageStatus gives, if the image is there."""
        st = self.image_status(image)
        if st is not None:
            self.c.remove_image(st.id)

    def list_images(self) -> list[pb.Image]:
        return self.c.list_images()

    # -- clean-up --------------------------------------------------------------------------------
    def close(self) -> None:
        errors = []
        for fn in reversed(self.cleanups):
            try:
                fn()
            except Exception as e:  # keep cleaning; report at the end
                errors.append(e)
        for sid in self.sandboxes:
            try:
                self.c.stop_pod_sandbox(sid)
                self.c.remove_pod_sandbox(sid)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.NOT_FOUND:
                    errors.append(e)
        left = self.runtime.drop_cgroups(self.parents)
        shutil.rmtree(self.tmp, ignore_errors=True)
        if errors:
            raise errors[0]
        if left:
            raise AssertionError(f"cgroups left behind: {left}")


# -- streaming: channel.k8s.io over websocket (kubectl/crictl's newer transport; containerd's
#    streaming server speaks it too) ---------------------------------------------------------------
STDIN, STDOUT, STDERR, ERROR = 0, 1, 2, 3


async def _stream(url: str, send: Callable[[Any, dict], Any] | None, until: Callable[[dict], bool] | None,
                  limit: float) -> dict[int, bytes]:
    import aiohttp

    got: dict[int, bytes] = {}
    async with aiohttp.ClientSession() as s, s.ws_connect(
            url, protocols=["v4.channel.k8s.io"], timeout=aiohttp.ClientWSTimeout(ws_close=limit)) as ws:
        sender = asyncio.create_task(send(ws, got)) if send else None
        try:
            async with asyncio.timeout(limit):
                async for msg in ws:
                    if msg.type != aiohttp.WSMsgType.BINARY:
                        break
                    if msg.data:
                        got[msg.data[0]] = got.get(msg.data[0], b"") + msg.data[1:]
                    if until and until(got):
                        break
        finally:
            if sender:
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await sender
    return got


def stream(url: str, send: Callable[[Any, dict], Any] | None = None,
           until: Callable[[dict], bool] | None = None,
           timeout: float = 60.0) -> dict[int, bytes]:
    """Run one exec/attach session: `send(ws, got)` writes stdin; returns bytes per channel."""
    return asyncio.run(_stream(url, send, until, timeout))


async def _spdy_attach_echo_hello(url: str) -> dict[str, bytes]:
    from tests.integration.cri.spdy_client import SpdyClient

    c = await SpdyClient.upgrade(url, ["v4.channel.k8s.io"])
    assert c.status == 101, c.response_headers
    try:
        kinds = ("error", "stdin", "stdout", "stderr")
        streams = {kind: await c.open({"streamtype": kind}) for kind in kinds}
        for st in streams.values():
            await asyncio.wait_for(st.replied.wait(), 10)
        await asyncio.sleep(1)  # "the container should stop output when there is no input"
        await streams["stdin"].write(ATTACH_ECHO_HELLO + b"\n")  # and stdin stays open
        end = time.monotonic() + 60
        while bytes(streams["stdout"].data) != b"hello" and time.monotonic() < end:  # noqa: ASYNC110
            await asyncio.sleep(0.1)  # Eventually hello ...
        await asyncio.sleep(3)  # ... and Consistently nothing else
        return {"stdout": bytes(streams["stdout"].data), "stderr": bytes(streams["stderr"].data)}
    finally:
        await c.close()


def spdy_attach_echo_hello(url: str) -> dict[str, bytes]:
    """checkAttach over SPDY (critest's default transport): stdin held open after `echo -n hello`; what
    stdout and stderr received within Eventually + Consistently."""
    return asyncio.run(_spdy_attach_echo_hello(url))


async def _port_forward_get(url: str, port: int, limit: float) -> bytes:
    """One GET / through a port-forward session (data channel 0, error channel 1, each opened with the
    port in 2 bytes little-endian), returning the raw HTTP response."""
    import aiohttp

    sep = "&" if "?" in url else "?"
    data, err, seen = b"", b"", {0: False, 1: False}
    async with aiohttp.ClientSession() as s, s.ws_connect(f"{url}{sep}port={port}",
                                                          protocols=["v4.channel.k8s.io"]) as ws:
        sent = False
        async with asyncio.timeout(limit):
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.BINARY:
                    break
                ch, payload = msg.data[0], msg.data[1:]
                if not seen.get(ch, True):
                    assert struct.unpack("<H", payload[:2])[0] == port
                    seen[ch] = True
                    payload = payload[2:]
                if ch == 0:
                    data += payload
                elif ch == 1:
                    err += payload
                if all(seen.values()) and not sent:
                    await ws.send_bytes(b"\x00GET / HTTP/1.0\r\nHost: localhost\r\n\r\n")
                    sent = True
                if err:
                    raise AssertionError(f"port forward error: {err!r}")
    return data


def port_forward_get(url: str, port: int, timeout: float = 60.0) -> bytes:
    return asyncio.run(_port_forward_get(url, port, timeout))


def http_get(url: str, timeout: float = 60.0) -> int:
    """checkMainPage: GET until it answers (within a minute); returns the status code."""
    import urllib.request

    def get() -> int:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status

    code = eventually(get, lambda c: c is not None, timeout, 1.0)
    assert code is not None, f"{url} never answered"
    return code
