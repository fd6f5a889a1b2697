"""Liveness, readiness and startup probes (kubelet pkg/kubelet/prober, pkg/probe/{http,tcp,exec,grpc}).

- `probe_http` / `probe_tcp` / `probe_exec` / `probe_grpc`: one check each, returning an `Outcome`.
- `Prober`: runs the check a container's probe spec asks for (named ports, host = pod IP, defaults).
- `ResultsManager`: the latest result per container ID; changes are queued for the pod worker.
- `Worker`: kubelet's probe worker: initialDelaySeconds, periodSeconds, success/failure thresholds,
  startup gating, hold after a liveness failure until a new container appears.
- `ProbeManager`: one worker per (pod, container, probe type), run inside its own TaskGroup, and the
  ready/started values the status generator needs.
The clock is injected; exec goes through `exec_sync(container_id, cmd, timeout)` (CRI ExecSync).
One module (about 600 lines) as kubelet's prober package is one: the checks, the worker that
schedules them and the manager that owns the workers share one Outcome and result cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import errno
import inspect
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urljoin, urlsplit

from nodeagent.api.times import parse_rfc3339
from nodeagent.clock import REAL_CLOCK, Clock

log = logging.getLogger(__name__)

MAX_OUTPUT = 10 * 1024  # kubelet keeps at most 10 KiB of a probe's output
USER_AGENT = "kube-probe/1.32"
MAX_REDIRECTS = 10

LIVENESS, READINESS, STARTUP = "liveness", "readiness", "startup"
PROBE_FIELDS = {LIVENESS: "livenessProbe", READINESS: "readinessProbe", STARTUP: "startupProbe"}


class Result(enum.StrEnum):
    SUCCESS = "Success"
    WARNING = "Warning"  # counts as success; reported with a ProbeWarning event
    FAILURE = "Failure"
    UNKNOWN = "Unknown"


@dataclasses.dataclass(frozen=True)
class Outcome:
    result: Result
    output: str = ""


class ProbeError(Exception):
    """The probe could not be run at all (bad spec); its result is thrown away, as kubelet does."""


ExecSync = Callable[[str, Sequence[str], float], "Awaitable[tuple[int, bytes | str, bytes | str]] | tuple"]


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    if isinstance(b, bytes):
        b = b[:MAX_OUTPUT].decode("utf-8", "replace")
    return b[:MAX_OUTPUT]


def _dial_error(host: str, port: int, err: BaseException) -> str:
    if isinstance(err, TimeoutError):
        return f"dial tcp {host}:{port}: i/o timeout"
    if isinstance(err, OSError) and err.errno is not None:
        why = {errno.ECONNREFUSED: "connection refused", errno.EHOSTUNREACH: "no route to host",
               errno.ENETUNREACH: "network is unreachable"}.get(err.errno, err.strerror or str(err))
        return f"dial tcp {host}:{port}: connect: {why}"
    return f"dial tcp {host}:{port}: {err}"


# -- the checks -----------------------------------------------------------------------------------


async def probe_tcp(host: str, port: int, timeout_s: float) -> Outcome:
    """Success when a TCP connection opens within the timeout."""
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError) as e:
        return Outcome(Result.FAILURE, _dial_error(host, port, e))
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return Outcome(Result.SUCCESS)


def format_url(scheme: str, host: str, port: int, path: str) -> str:
    """kubelet formatURL: IPv6 hosts bracketed, path as given."""
    h = f"[{host}]" if ":" in host and not host.startswith("[") else host
    if not path.startswith("/"):
        path = "/" + path
    return f"{scheme.lower()}://{h}:{port}{path}"


async def probe_http(url: str, headers: Mapping[str, str] | None, timeout_s: float) -> Outcome:
    """GET url: 2xx success, a 3xx that is not followed Warning (counted as success), else failure.

    Redirects to the same hostname are followed (up to 10), redirects elsewhere are not: kubelet's
    redirect checker returns the 3xx itself, which is reported as "Probe terminated redirects".
    """
    import aiohttp

    hdrs = {"User-Agent": USER_AGENT, "Accept": "*/*"}
    for k, v in (headers or {}).items():
        hdrs[k] = v
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # kubelet probes skip TLS verification
    first_host = urlsplit(url).hostname
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, force_close=True),
                                         timeout=aiohttp.ClientTimeout(total=timeout_s),
                                         auto_decompress=True) as session:
            current = url
            for hop in range(MAX_REDIRECTS + 1):
                async with session.get(current, headers=hdrs, allow_redirects=False) as resp:
                    body = _text(await resp.content.read(MAX_OUTPUT))
                    location = resp.headers.get("Location")
                    if 300 <= resp.status < 400 and location and resp.status != 304:
                        target = urljoin(current, location)
                        if urlsplit(target).hostname != first_host:
                            return Outcome(Result.WARNING,
                                           f"Probe terminated redirects, Response body: {body}")
                        if hop == MAX_REDIRECTS:
                            return Outcome(Result.FAILURE, f'Get "{url}": stopped after 10 redirects')
                        current = target
                        continue
                    if 300 <= resp.status < 400:  # a redirect not followed (other host, 304, no Location)
                        return Outcome(Result.WARNING, f"Probe terminated redirects, Response body: {body}")
                    if 200 <= resp.status < 300:
                        return Outcome(Result.SUCCESS, body)
                    return Outcome(Result.FAILURE, f"HTTP probe failed with statuscode: {resp.status}")
    except TimeoutError:
        return Outcome(Result.FAILURE,
                       f'Get "{url}": context deadline exceeded (Client.Timeout exceeded while '
                       'awaiting headers)')
    except aiohttp.ClientConnectorError as e:
        parts = urlsplit(url)
        return Outcome(Result.FAILURE, f'Get "{url}": ' + _dial_error(parts.hostname or "", parts.port or 0,
                                                                      e.os_error))
    except aiohttp.ClientError as e:
        return Outcome(Result.FAILURE, f'Get "{url}": {e}')
    return Outcome(Result.FAILURE, f'Get "{url}": stopped after 10 redirects')


async def probe_exec(exec_sync: ExecSync, container_id: str, cmd: Sequence[str], timeout_s: float) -> Outcome:
    """Run cmd in the container through CRI ExecSync: exit 0 success, otherwise failure with the output."""
    try:
        res = exec_sync(container_id, list(cmd), timeout_s)
        if inspect.isawaitable(res):
            async with asyncio.timeout(timeout_s + 1.0):
                res = await res
    except TimeoutError:
        return Outcome(Result.FAILURE, f"command {_go_quote(' '.join(cmd))} timed out")
    code, stdout, stderr = res
    output = (_text(stdout) + _text(stderr))[:MAX_OUTPUT]
    if code == 0:
        return Outcome(Result.SUCCESS, output)
    return Outcome(Result.FAILURE, output or f"command {_go_quote(' '.join(cmd))} exited with {code}")


def _go_quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _encode_health_request(service: str) -> bytes:
    data = service.encode()
    if not data:
        return b""
    n, varint = len(data), bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        varint.append(b | (0x80 if n else 0))
        if not n:
            break
    return b"\x0a" + bytes(varint) + data


def _decode_health_status(data: bytes) -> int:
    """grpc.health.v1.HealthCheckResponse.status (field 1, varint); 0 = UNKNOWN when absent."""
    i = 0
    while i < len(data):
        key = data[i]
        i += 1
        if key == 0x08:
            val, shift = 0, 0
            while True:
                b = data[i]
                i += 1
                val |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    return val
        break
    return 0


_HEALTH_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


async def probe_grpc(host: str, port: int, service: str, timeout_s: float) -> Outcome:
    """grpc.health.v1.Health/Check: SERVING is success."""
    import grpc

    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    async with grpc.aio.insecure_channel(target) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check", request_serializer=_encode_health_request,
                                    response_deserializer=_decode_health_status)
        try:
            status = await check(service, timeout=timeout_s, wait_for_ready=False)
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                return Outcome(Result.FAILURE, "this server does not implement the grpc health protocol "
                                               f"(grpc.health.v1.Health): {e.details()}")
            if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return Outcome(Result.FAILURE, f"timeout: health rpc did not complete within {timeout_s:g}s")
            return Outcome(Result.FAILURE, f"error: health rpc probe failed: {e.code().name}: {e.details()}")
    if status == 1:
        return Outcome(Result.SUCCESS)
    return Outcome(Result.FAILURE,
                   f'service unhealthy (responded with "{_HEALTH_STATUS.get(status, status)}")')


# -- the prober: probe spec → check ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ProbeSpec:
    """A v1.Probe with the apiserver's defaults applied."""

    handler: Mapping[str, Any]
    initial_delay: int = 0
    period: int = 10
    timeout: int = 1
    success_threshold: int = 1
    failure_threshold: int = 3

    @classmethod
    def from_dict(cls, probe: Mapping[str, Any]) -> ProbeSpec:
        return cls(handler=probe, initial_delay=int(probe.get("initialDelaySeconds") or 0),
                   period=int(probe.get("periodSeconds") or 10),
                   timeout=int(probe.get("timeoutSeconds") or 1),
                   success_threshold=int(probe.get("successThreshold") or 1),
                   failure_threshold=int(probe.get("failureThreshold") or 3))


def resolve_port(port: int | str, container: Mapping[str, Any]) -> int:
    """extractPort: a number, a named containerPort, or a number written as a string."""
    if isinstance(port, str):
        for p in container.get("ports") or []:
            if p.get("name") == port:
                port = int(p["containerPort"])
                break
        else:
            try:
                port = int(port)
            except ValueError:
                raise ProbeError(f"couldn't find port: {port} in {container.get('name')}") from None
    if not 0 < int(port) < 65536:
        raise ProbeError(f"invalid port number: {port}")
    return int(port)


EventSink = Callable[[Mapping[str, Any], Mapping[str, Any], str, str, str], None]


class Prober:
    """Runs a container's probe of one type and reports Unhealthy / ProbeWarning events."""

    def __init__(self, exec_sync: ExecSync | None = None, on_event: EventSink | None = None) -> None:
        self.exec_sync = exec_sync
        self.on_event = on_event

    async def run(self, spec: ProbeSpec, pod: Mapping[str, Any], pod_ip: str, container: Mapping[str, Any],
                  container_id: str) -> Outcome:
        h = spec.handler
        if "exec" in h:
            if self.exec_sync is None:
                raise ProbeError("exec probes need a runtime (exec_sync)")
            return await probe_exec(self.exec_sync, _strip_runtime(container_id),
                                    h["exec"].get("command") or [], spec.timeout)
        if "httpGet" in h:
            g = h["httpGet"]
            port = resolve_port(g.get("port"), container)
            host = g.get("host") or pod_ip
            headers = {x["name"]: x.get("value", "") for x in g.get("httpHeaders") or []}
            url = format_url(g.get("scheme") or "HTTP", host, port, g.get("path") or "/")
            return await probe_http(url, headers, spec.timeout)
        if "tcpSocket" in h:
            t = h["tcpSocket"]
            return await probe_tcp(t.get("host") or pod_ip,
                                   resolve_port(t.get("port"), container), spec.timeout)
        if "grpc" in h:
            g = h["grpc"]
            return await probe_grpc(pod_ip, int(g["port"]), g.get("service") or "", spec.timeout)
        raise ProbeError(f"missing probe handler for {container.get('name')}")

    async def probe(self, probe_type: str, spec: ProbeSpec, pod: Mapping[str, Any], pod_ip: str,
                    container: Mapping[str, Any], container_id: str) -> Result:
        """prober.probe: the result, with events for failures and warnings; ProbeError propagates."""
        out = await self.run(spec, pod, pod_ip, container, container_id)
        name = probe_type.capitalize()
        if out.result == Result.FAILURE:
            self._event(pod, container, "Unhealthy", f"{name} probe failed: {out.output}")
        elif out.result == Result.WARNING:
            self._event(pod, container, "ProbeWarning", f"{name} probe warning: {out.output}")
            return Result.SUCCESS
        return out.result

    def _event(self, pod: Mapping[str, Any], container: Mapping[str, Any], reason: str, message: str) -> None:
        if self.on_event is not None:
            self.on_event(pod, container, "Warning", reason, message)


def _strip_runtime(container_id: str) -> str:
    return container_id.split("://", 1)[-1]


# -- results ----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Update:
    container_id: str
    result: Result
    pod_uid: str


class ResultsManager:
    """Latest result per container ID; each change is queued on `updates` for the pod worker."""

    def __init__(self) -> None:
        self._results: dict[str, Result] = {}
        self.updates: asyncio.Queue[Update] = asyncio.Queue()

    def get(self, container_id: str) -> Result | None:
        return self._results.get(container_id)

    def set(self, container_id: str, result: Result, pod: Mapping[str, Any]) -> None:
        if self._results.get(container_id) != result:
            self._results[container_id] = result
            self.updates.put_nowait(Update(container_id, result, (pod.get("metadata") or {}).get("uid", "")))

    def remove(self, container_id: str) -> None:
        self._results.pop(container_id, None)


def liveness_kill_message(container_name: str, probe_type: str = LIVENESS, restart: bool = True) -> str:
    """The Killing event message after a liveness/startup failure (kuberuntime computePodActions)."""
    msg = f"Container {container_name} failed {probe_type} probe"
    return f"{msg}, will be restarted" if restart else msg


# -- the worker -----------------------------------------------------------------------------------


StatusProvider = Callable[[str], "Mapping[str, Any] | None"]


def _container_status(status: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    for s in list(status.get("containerStatuses") or []) + list(status.get("initContainerStatuses") or []):
        if s.get("name") == name:
            return s
    return None


class Worker:
    """One probe of one container. `do_probe()` is one tick (returns False to stop); `run()` loops."""

    def __init__(self, probe_type: str, pod: Mapping[str, Any], container: Mapping[str, Any],
                 prober: Prober, results: ResultsManager, get_status: StatusProvider,
                 clock: Clock | None = None, on_startup_success: Callable[[], None] | None = None) -> None:
        self.probe_type = probe_type
        self.pod = pod
        self.container = container
        self.spec = ProbeSpec.from_dict(container[PROBE_FIELDS[probe_type]])
        self.prober = prober
        self.results = results
        self.get_status = get_status
        self.clock = clock or REAL_CLOCK
        self.on_startup_success = on_startup_success
        self.initial = {READINESS: Result.FAILURE, LIVENESS: Result.SUCCESS,
                        STARTUP: Result.UNKNOWN}[probe_type]
        self.container_id = ""
        self.last_result = Result.UNKNOWN
        self.result_run = 0
        self.on_hold = False
        self._stop = asyncio.Event()
        self._trigger = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()
        self._trigger.set()

    def trigger(self) -> None:
        """Probe now instead of at the next period (readiness after startup succeeds)."""
        self._trigger.set()

    async def do_probe(self) -> bool:
        status = self.get_status((self.pod.get("metadata") or {}).get("uid", ""))
        if status is None:
            return True  # not created yet, or already gone
        if status.get("phase") in ("Failed", "Succeeded"):
            return False
        c = _container_status(status, self.container["name"])
        if c is None or not c.get("containerID"):
            return True
        if c["containerID"] != self.container_id:
            if self.container_id:
                self.results.remove(self.container_id)
            self.container_id = c["containerID"]
            self.results.set(self.container_id, self.initial, self.pod)
            self.on_hold = False
            self.last_result, self.result_run = Result.UNKNOWN, 0
        if self.on_hold:
            return True
        state = c.get("state") or {}
        if "running" not in state:
            self.results.set(self.container_id, Result.FAILURE, self.pod)
            return "terminated" not in state or (self.pod.get("spec") or {}).get("restartPolicy") != "Never"
        if (self.pod.get("metadata") or {}).get("deletionTimestamp") \
                and self.probe_type in (LIVENESS, STARTUP):
            self.results.set(self.container_id, Result.SUCCESS, self.pod)
            return False
        started_at = (state["running"] or {}).get("startedAt")
        if started_at and self.clock.now() - parse_rfc3339(started_at) < self.spec.initial_delay:
            return True
        if c.get("started"):
            if self.probe_type == STARTUP:
                return True  # started: nothing more to probe for this container
        elif self.probe_type != STARTUP:
            return True  # other probes wait for startup
        try:
            result = await self.prober.probe(self.probe_type, self.spec, self.pod, status.get("podIP", ""),
                                             self.container, self.container_id)
        except ProbeError as e:
            log.warning("probe %s of %s: %s", self.probe_type, self.container.get("name"), e)
            return True
        if result == self.last_result:
            self.result_run += 1
        else:
            self.last_result, self.result_run = result, 1
        if (result == Result.FAILURE and self.result_run < self.spec.failure_threshold) or \
                (result == Result.SUCCESS and self.result_run < self.spec.success_threshold):
            return True
        self.results.set(self.container_id, result, self.pod)
        if self.probe_type in (LIVENESS, STARTUP) and result == Result.FAILURE:
            # The container will be restarted: hold until a new container ID shows up.
            self.on_hold = True
            self.result_run = 0
        if self.probe_type == STARTUP and result == Result.SUCCESS and self.on_startup_success:
            self.on_startup_success()
        return True

    async def run(self) -> None:
        while not self._stop.is_set():
            if not await self.do_probe():
                break
            await self._wait(self.spec.period)
        if self.container_id:
            self.results.remove(self.container_id)

    async def _wait(self, seconds: float) -> None:
        sleeper = asyncio.ensure_future(self.clock.sleep(seconds))
        trig = asyncio.ensure_future(self._trigger.wait())
        try:
            await asyncio.wait({sleeper, trig}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (sleeper, trig):
                t.cancel()
            self._trigger.clear()


# -- the manager -----------------------------------------------------------------------------------


class ProbeManager:
    """Starts and stops workers per pod; answers ready/started for status generation."""

    def __init__(self, prober: Prober, get_status: StatusProvider, clock: Clock | None = None) -> None:
        self.prober = prober
        self.get_status = get_status
        self.clock = clock or REAL_CLOCK
        self.liveness = ResultsManager()
        self.readiness = ResultsManager()
        self.startup = ResultsManager()
        self._workers: dict[tuple[str, str, str], Worker] = {}
        self._tasks: dict[tuple[str, str, str], asyncio.Task] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._ready = asyncio.Event()
        self._started_seen: set[str] = set()

    def _results(self, probe_type: str) -> ResultsManager:
        return {LIVENESS: self.liveness, READINESS: self.readiness, STARTUP: self.startup}[probe_type]

    async def run(self) -> None:
        """Own the workers' TaskGroup until cancelled."""
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            self._ready.set()
            try:
                await asyncio.Event().wait()
            finally:
                for w in self._workers.values():
                    w.stop()
                self._tg = None

    async def wait_ready(self) -> None:
        await self._ready.wait()

    @staticmethod
    def _probed_containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        spec = pod.get("spec") or {}
        sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
        return sidecars + list(spec.get("containers") or [])

    def add_pod(self, pod: Mapping[str, Any]) -> None:
        if self._tg is None:
            raise RuntimeError("ProbeManager.run() is not running")
        uid = (pod.get("metadata") or {}).get("uid", "")
        for c in self._probed_containers(pod):
            readiness_key = (uid, c["name"], READINESS)
            for probe_type, field in PROBE_FIELDS.items():
                key = (uid, c["name"], probe_type)
                if not c.get(field) or key in self._workers:
                    continue
                on_started = None
                if probe_type == STARTUP:
                    def on_started(k=readiness_key) -> None:
                        w = self._workers.get(k)
                        if w is not None:
                            w.trigger()
                w = Worker(probe_type, pod, c, self.prober, self._results(probe_type), self.get_status,
                           self.clock, on_started)
                self._workers[key] = w
                self._tasks[key] = self._tg.create_task(self._run_worker(key, w))

    async def _run_worker(self, key: tuple[str, str, str], w: Worker) -> None:
        try:
            await w.run()
        except Exception:  # a worker bug must not take the manager down
            log.exception("probe worker %s crashed", key)
        finally:
            if self._workers.get(key) is w:
                del self._workers[key]
                self._tasks.pop(key, None)

    def update_pod(self, pod: Mapping[str, Any]) -> None:
        """Give the pod's workers its latest object (a deletionTimestamp stops liveness/startup probing)."""
        uid = (pod.get("metadata") or {}).get("uid", "")
        for key, w in self._workers.items():
            if key[0] == uid:
                w.pod = pod

    def remove_pod(self, pod_uid: str) -> None:
        for key, w in list(self._workers.items()):
            if key[0] == pod_uid:
                if w.container_id:
                    self._started_seen.discard(w.container_id)
                w.stop()

    def has_worker(self, pod_uid: str, name: str, probe_type: str) -> bool:
        return (pod_uid, name, probe_type) in self._workers

    def started_and_ready(self, pod: Mapping[str, Any], container_ids: Mapping[str, str],
                          running: Mapping[str, bool]) -> tuple[dict[str, bool], dict[str, bool]]:
        """UpdatePodStatus: per container name, (started, ready) from the results, or from "no such probe"."""
        uid = (pod.get("metadata") or {}).get("uid", "")
        started: dict[str, bool] = {}
        ready: dict[str, bool] = {}
        for c in self._probed_containers(pod):
            name = c["name"]
            cid = container_ids.get(name, "")
            if not running.get(name):
                started[name] = ready[name] = False
                continue
            r = self.startup.get(cid)
            started[name] = (r == Result.SUCCESS if r is not None
                             else not self.has_worker(uid, name, STARTUP) and not c.get("startupProbe"))
            if not started[name]:
                ready[name] = False
                continue
            if cid not in self._started_seen:
                # Just started: probe readiness now rather than a period later (its worker reads the status
                # this call is about to produce).
                self._started_seen.add(cid)
                w = self._workers.get((uid, name, READINESS))
                if w is not None:
                    w.trigger()
            r = self.readiness.get(cid)
            if r is not None:
                ready[name] = r == Result.SUCCESS
            else:
                ready[name] = not c.get("readinessProbe")
                w = self._workers.get((uid, name, READINESS))
                if w is not None:
                    w.trigger()
        return started, ready
