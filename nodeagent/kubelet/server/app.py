"""The kubelet's Node API (pkg/kubelet/server): HTTPS on 10250 with token or client-cert auth.

/healthz, /pods, /stats/summary, /metrics, /containerLogs/{ns}/{pod}/{container}, and the streaming
verbs /exec, /attach, /portForward: for those the kubelet asks the runtime (CRI Exec/Attach/PortForward)
for a one-time URL and relays the client's upgrade request to it byte for byte (relay.py), so the
client speaks directly with whatever protocol the runtime serves. Errors are Kubernetes Status objects.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from aiohttp import web

from cri.client import RuntimeClient
from nodeagent.api.status import status_body
from nodeagent.clock import REAL_CLOCK, Clock
from nodeagent.kubelet.labels import CONTAINER_NAME_LABEL, POD_UID_LABEL
from nodeagent.kubelet.server import cadvisor, exposition, resource_metrics
from nodeagent.kubelet.server import logs as logsmod
from nodeagent.kubelet.server.auth import Authenticator
from nodeagent.kubelet.server.metrics import KubeletMetrics, http_labels
from nodeagent.kubelet.server.relay import relay
from nodeagent.kubelet.server.stats import SummaryProvider, VolumeStats

log = logging.getLogger("nodeagent.kubelet.server")

DEFAULT_PORT = 10250
_TRUE = {"1", "true", "yes", "t", "y"}


def status(code: int, reason: str, message: str, **details: Any) -> web.Response:
    body = status_body("Failure", message=message, reason=reason, details=details or None, code=code)
    return web.json_response(body, status=code)


class StatusError(Exception):
    def __init__(self, code: int, reason: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.response = status(code, reason, message, **details)


def not_found(kind: str, name: str, message: str | None = None) -> StatusError:
    return StatusError(404, "NotFound", message or f'{kind} "{name}" not found', name=name, kind=kind)


def bad_request(message: str) -> StatusError:
    return StatusError(400, "BadRequest", message)


def _flag(q: Any, *names: str) -> bool:
    return any(q.get(n, "").lower() in _TRUE for n in names)


def _grpc_error(e: grpc.aio.AioRpcError, what: str) -> StatusError:
    code = e.code()
    msg = f"{what}: {e.details()}"
    if code == grpc.StatusCode.NOT_FOUND:
        return StatusError(404, "NotFound", msg)
    if code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION):
        return bad_request(msg)
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return StatusError(501, "NotImplemented", msg)
    return StatusError(500, "InternalError", msg)


@dataclass
class ServerDeps:
    """What the Node API needs from the kubelet (kept narrow so it can be tested with fakes)."""

    node_name: str
    cri: RuntimeClient
    pods: Callable[[], list[dict[str, Any]]]  # the pods this kubelet runs, with their latest status
    metrics: KubeletMetrics
    root_dir: str
    log_dir: str
    clock: Clock = REAL_CLOCK  # sinceSeconds of a log request counts back from its now()
    cgroup_root: tuple[str, ...] = ()  # where the kubelet puts kubepods (/metrics/cadvisor finds pods by it)
    volume_stats: VolumeStats | None = None  # the volume manager's measure of a pod's volumes


class KubeletServer:
    def __init__(self, deps: ServerDeps, auth: Authenticator | None) -> None:
        self.deps = deps
        self.auth = auth
        self.stats = SummaryProvider(deps.node_name, deps.cri, deps.root_dir, deps.log_dir, self._pods_by_uid,
                                     deps.volume_stats)
        self.resource = resource_metrics.ResourceCollector(deps.cri, self._pods_by_uid)
        self.cadvisor = cadvisor.CadvisorCollector(deps.cri, self._pods_by_uid, deps.cgroup_root,
                                                   self._cgroup_driver)
        self._cgroups: Any = None
        self._machine: dict[str, int] | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware])
        r = app.router
        r.add_get("/healthz", self._healthz)
        r.add_get("/pods", self._pods)
        r.add_get("/stats/summary", self._summary)
        r.add_post("/stats/summary", self._summary)
        r.add_get("/metrics", self._metrics)
        r.add_get("/metrics/resource", self._metrics_resource)
        r.add_get("/metrics/cadvisor", self._metrics_cadvisor)
        r.add_get("/containerLogs/{ns}/{pod}/{container}", self._container_logs)
        for verb, fn in (("exec", self._exec), ("attach", self._attach)):
            for path in (f"/{verb}/{{ns}}/{{pod}}/{{container}}",
                         f"/{verb}/{{ns}}/{{pod}}/{{uid}}/{{container}}"):
                r.add_route("GET", path, fn)
                r.add_route("POST", path, fn)
        for path in ("/portForward/{ns}/{pod}", "/portForward/{ns}/{pod}/{uid}"):
            r.add_route("GET", path, self._port_forward)
            r.add_route("POST", path, self._port_forward)
        return app

    async def start(self, host: str, port: int, ssl_ctx: Any) -> int:
        self._runner = web.AppRunner(self.app(), access_log=None, handler_cancellation=True,
                                     shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=ssl_ctx, backlog=256)
        await site.start()
        self.port = self._runner.addresses[0][1]  # the one site's bound address
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self.auth is not None:
            await self.auth.close()

    # -- auth ------------------------------------------------------------------------------------------
    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        server_type = "readwrite" if self.auth is not None else "readonly"
        labels = http_labels(request.method, request.path, server_type)
        self.deps.metrics.http_requests.labels(*labels).inc()
        # in flight until the answer is done or the client has gone (aiohttp then cancels the handler)
        inflight = self.deps.metrics.http_inflight.labels(*labels)
        inflight.inc()
        try:
            if self.auth is not None:
                transport = request.transport
                peercert = transport.get_extra_info("peercert") if transport is not None else None
                d = await self.auth.check(request.method, request.path,
                                          request.headers.get("Authorization"), peercert)
                if d.status == 401:
                    return web.Response(status=401, text="Unauthorized")
                if d.status != 200:
                    return web.Response(status=d.status, text=d.reason)
            try:
                return await handler(request)
            except StatusError as e:
                return e.response
        finally:
            inflight.dec()

    # -- simple endpoints ------------------------------------------------------------------------------
    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    def _pods_by_uid(self) -> dict[str, dict[str, Any]]:
        return {p["metadata"].get("uid", ""): p for p in self.deps.pods()}

    async def _pods(self, request: web.Request) -> web.Response:
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": {},
                                  "items": self.deps.pods()})

    async def _summary(self, request: web.Request) -> web.Response:
        summary = await self.stats.summary()
        if request.query.get("only_cpu_and_memory", "").lower() in _TRUE:
            for p in [summary["node"], *summary["pods"]]:
                for k in [k for k in p if k not in ("nodeName", "podRef", "startTime", "cpu", "memory",
                                                    "containers")]:
                    del p[k]
        return web.json_response(summary)

    async def _metrics(self, request: web.Request) -> web.Response:
        body = await asyncio.to_thread(self.deps.metrics.exposition)
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def _metrics_resource(self, request: web.Request) -> web.Response:
        stats = await self.resource.collect()
        body = await asyncio.to_thread(lambda: exposition.render(resource_metrics.families(stats)))
        return web.Response(body=body, headers={"Content-Type": exposition.CONTENT_TYPE})

    def _cgroup_driver(self) -> Any:
        return self._cgroups

    async def _metrics_cadvisor(self, request: web.Request) -> web.Response:
        if self._machine is None:
            self._machine = await asyncio.to_thread(cadvisor.machine_facts)
            self._cgroups = await asyncio.to_thread(_detect_cgroups)
        cgroups, error = await self.cadvisor.collect()
        root, root_net = await asyncio.to_thread(cadvisor.machine_usage)
        machine = self._machine
        body = await asyncio.to_thread(
            lambda: exposition.render(cadvisor.families(cgroups, error, machine, root, root_net)))
        return web.Response(body=body, headers={"Content-Type": exposition.CONTENT_TYPE})

    # -- pods and containers -----------------------------------------------------------------------------
    def _find_pod(self, ns: str, name: str, uid: str | None = None) -> dict[str, Any]:
        for p in self.deps.pods():
            m = p.get("metadata") or {}
            if m.get("name") == name and m.get("namespace", "default") == ns \
                    and (not uid or m.get("uid") == uid):
                return p
        raise not_found("pods", name, f'pod "{ns}/{name}" not found on node "{self.deps.node_name}"')

    @staticmethod
    def _check_container(pod: dict[str, Any], name: str) -> None:
        spec = pod.get("spec") or {}
        names = [c.get("name") for key in ("initContainers", "containers", "ephemeralContainers")
                 for c in spec.get(key) or []]
        if name not in names:
            m = pod["metadata"]
            raise not_found("containers", name, f'container "{name}" not found in pod "{m.get("namespace")}/'
                                                f'{m["name"]}"')

    async def _runtime_containers(self, pod: dict[str, Any], name: str) -> list[Any]:
        """The runtime's instances of one container of a pod, newest first."""
        try:
            ctrs = await self.deps.cri.list_containers(label_selector={POD_UID_LABEL: pod["metadata"]["uid"]})
        except grpc.aio.AioRpcError as e:
            raise _grpc_error(e, "listing the pod's containers") from None
        ctrs = [c for c in ctrs if c.labels.get(CONTAINER_NAME_LABEL) == name]
        return sorted(ctrs, key=lambda c: (c.metadata.attempt, c.created_at), reverse=True)

    async def _container(self, request: web.Request) -> tuple[dict[str, Any], Any]:
        mi = request.match_info
        pod = self._find_pod(mi["ns"], mi["pod"], mi.get("uid"))
        self._check_container(pod, mi["container"])
        ctrs = await self._runtime_containers(pod, mi["container"])
        if not ctrs:
            raise bad_request(f'container "{mi["container"]}" in pod "{mi["pod"]}" is waiting to start: '
                              "ContainerCreating")
        return pod, ctrs[0]

    # -- logs ------------------------------------------------------------------------------------------
    async def _container_logs(self, request: web.Request) -> web.StreamResponse:
        from cri.proto import api_pb2 as pb

        mi, q = request.match_info, request.query
        pod = self._find_pod(mi["ns"], mi["pod"])
        name = mi["container"]
        self._check_container(pod, name)
        ctrs = await self._runtime_containers(pod, name)
        previous = _flag(q, "previous")
        if previous:
            if len(ctrs) < 2:
                raise bad_request(f'previous terminated container "{name}" in pod "{mi["pod"]}" not found')
            target = ctrs[1]
        elif not ctrs:
            raise bad_request(f'container "{name}" in pod "{mi["pod"]}" is waiting to start: '
                              'ContainerCreating')
        else:
            target = ctrs[0]
        opts = _log_options(q, self.deps.clock.now())
        if previous:
            opts.follow = False
        try:
            st = (await self.deps.cri.container_status(target.id)).status
        except grpc.aio.AioRpcError as e:
            raise _grpc_error(e, "reading the container's status") from None
        if not st.log_path:
            raise bad_request(f'container "{name}" in pod "{mi["pod"]}" has no log file')

        async def running() -> bool:
            try:
                s = (await self.deps.cri.container_status(target.id)).status
            except grpc.aio.AioRpcError:
                return False
            return s.state == pb.CONTAINER_RUNNING

        try:
            stream = logsmod.read_logs(st.log_path, opts, running)
            first = await anext(stream, None)
        except FileNotFoundError:
            raise not_found("logs", st.log_path,
                            f'log file "{st.log_path}" of container "{name}" not found') \
                from None
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        if first:
            await resp.write(first)
            async for chunk in stream:
                await resp.write(chunk)
        await resp.write_eof()
        return resp

    # -- streaming verbs -----------------------------------------------------------------------------------
    @staticmethod
    def _need_upgrade(request: web.Request) -> None:
        if "upgrade" not in request.headers.get("Connection", "").lower() \
                or not request.headers.get("Upgrade"):
            raise bad_request("Upgrade request required")

    async def _exec(self, request: web.Request) -> web.StreamResponse:
        self._need_upgrade(request)
        q = request.query
        cmd = q.getall("command", [])
        if not cmd:
            raise bad_request("you must specify at least one command for the container")
        tty = _flag(q, "tty")
        stdin, stdout = _flag(q, "input", "stdin"), _flag(q, "output", "stdout")
        stderr = _flag(q, "error", "stderr") and not tty  # the terminal merges them, as the kubelet does
        if not (stdin or stdout or stderr):
            raise bad_request("you must specify at least 1 of stdin, stdout, stderr")
        _, ctr = await self._container(request)
        try:
            url = await self.deps.cri.exec(ctr.id, list(cmd), tty=tty, stdin=stdin, stdout=stdout,
                                           stderr=stderr)
        except grpc.aio.AioRpcError as e:
            raise _grpc_error(e, "exec") from None
        return await relay(request, url)

    async def _attach(self, request: web.Request) -> web.StreamResponse:
        self._need_upgrade(request)
        q = request.query
        tty = _flag(q, "tty")
        stdin, stdout = _flag(q, "input", "stdin"), _flag(q, "output", "stdout")
        stderr = _flag(q, "error", "stderr") and not tty
        if not (stdin or stdout or stderr):
            raise bad_request("you must specify at least 1 of stdin, stdout, stderr")
        _, ctr = await self._container(request)
        try:
            url = await self.deps.cri.attach(ctr.id, tty=tty, stdin=stdin, stdout=stdout, stderr=stderr)
        except grpc.aio.AioRpcError as e:
            raise _grpc_error(e, "attach") from None
        return await relay(request, url)

    async def _port_forward(self, request: web.Request) -> web.StreamResponse:
        from cri.proto import api_pb2 as pb

        self._need_upgrade(request)
        mi, q = request.match_info, request.query
        pod = self._find_pod(mi["ns"], mi["pod"], mi.get("uid"))
        ports = []
        for raw in q.getall("port", []) + [p for v in q.getall("ports", []) for p in v.split(",")]:
            try:
                ports.append(int(raw))
            except ValueError:
                raise bad_request(f"invalid port {raw!r}") from None
        try:
            uid = pod["metadata"]["uid"]
            boxes = await self.deps.cri.list_pod_sandbox(label_selector={POD_UID_LABEL: uid})
        except grpc.aio.AioRpcError as e:
            raise _grpc_error(e, "listing the pod's sandboxes") from None
        ready = sorted((b for b in boxes if b.state == pb.SANDBOX_READY),
                       key=lambda b: b.created_at, reverse=True)
        if not ready:
            raise bad_request(f'pod "{mi["pod"]}" has no ready sandbox')
        try:
            url = await self.deps.cri.port_forward(ready[0].id, ports)
        except grpc.aio.AioRpcError as e:
            raise _grpc_error(e, "port forward") from None
        return await relay(request, url)


def _detect_cgroups() -> Any:
    """This host's cgroup driver (v1 or v2), or None where there are no cgroups to read."""
    try:
        from kernel.cgroups import detect

        return detect()
    except Exception as e:
        log.warning("/metrics/cadvisor: no cgroup driver: %s", e)
        return None


def _log_options(q: Any, now: float) -> logsmod.LogOptions:
    opts = logsmod.LogOptions(follow=_flag(q, "follow"), timestamps=_flag(q, "timestamps"))
    try:
        if q.get("tailLines"):
            opts.tail_lines = max(0, int(q["tailLines"]))
        if q.get("limitBytes"):
            opts.limit_bytes = int(q["limitBytes"])
            if opts.limit_bytes < 1:
                raise bad_request("limitBytes: must be greater than 0")
        if q.get("sinceTime"):
            opts.since = logsmod.parse_time(q["sinceTime"].encode())
        elif q.get("sinceSeconds"):
            secs = int(q["sinceSeconds"])
            if secs < 1:
                raise bad_request("sinceSeconds: must be greater than 0")
            opts.since = now - secs
    except ValueError as e:
        raise bad_request(f"invalid log options: {e}") from None
    return opts


def pod_list_item(pod: dict[str, Any], status: dict[str, Any] | None) -> dict[str, Any]:
    """A pod as /pods shows it: the object with the kubelet's latest view of its status. A shallow copy with
    a status of its own: its readers (the /pods answer, the stats and metrics collectors) only read it, and
    a deep copy of every pod at every scrape cost more than the scrape (a burst of 110 pods)."""
    out = dict(pod)
    if status:
        out["status"] = {**(pod.get("status") or {}), **status}
    return out

