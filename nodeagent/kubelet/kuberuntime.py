"""One pod's sync and kill through CRI (kubelet kuberuntime SyncPod / KillPod).

The pod worker calls `sync(pod)` with the latest desired pod and `kill(pod, grace)` when it terminates;
the decisions come from the pure modules (pod_actions, status, backoff, images, resources) and this file
only turns them into CRI calls, volume setup and events.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from cri.client import RuntimeClient, is_not_found
from cri.proto import api_pb2 as pb
from kernel.threads import finish, run_to_completion
from nodeagent.clock import Clock
from nodeagent.kubelet import images as image_policy
from nodeagent.kubelet import pod_files, resources
from nodeagent.kubelet import security_context as security
from nodeagent.kubelet.backoff import CrashLoopBackoff, ImagePullBackoff, container_backoff_key
from nodeagent.kubelet.cgroups import ensure_pod_cgroup, remove_cgroup, update_qos_cgroups
from nodeagent.kubelet.container_env import apply_env, prepare_sub_paths, pull_with_credentials, sub_path
from nodeagent.kubelet.envvars import ContainerSources, Env, EnvError, Standalone
from nodeagent.kubelet.labels import (
    CONTAINER_NAME_LABEL,
    HASH_ANNOTATION,
    POD_NAME_LABEL,
    POD_NAMESPACE_LABEL,
    POD_UID_LABEL,
)
from nodeagent.kubelet.pod_actions import PodActions, SandboxRecord, compute_pod_actions, latest_records
from nodeagent.kubelet.resolvconf import ResolvConf, pod_resolv_conf
from nodeagent.kubelet.start_slots import StartSlots
from nodeagent.kubelet.status import ContainerRecord, SyncError, container_hash, generate_pod_status
from nodeagent.kubelet.volumes.manager import VolumeError, VolumeManager

log = logging.getLogger("nodeagent.kubelet.kuberuntime")

_STATE = {pb.CONTAINER_CREATED: "created", pb.CONTAINER_RUNNING: "running", pb.CONTAINER_EXITED: "exited"}


@dataclasses.dataclass
class PodRuntimeState:
    """What the runtime holds for one pod right now."""

    sandboxes: list[pb.PodSandbox]
    records: list[ContainerRecord]
    pod_ips: list[str]
    sandbox_ready: bool


def uid_of(pod: Mapping[str, Any]) -> str:
    return (pod.get("metadata") or {}).get("uid", "")


def pod_name(pod: Mapping[str, Any]) -> str:
    m = pod.get("metadata") or {}
    return f"{m.get('namespace', 'default')}/{m.get('name', '')}"


class PodRuntime:
    """The CRI side of the pod workers: sync, kill, and the status of one pod."""

    def __init__(self, cri: RuntimeClient, volumes: VolumeManager, recorder: Any, clock: Clock, *,
                 log_root: Path, cgroup_root: tuple[str, ...], memory_capacity: int, runtime_name: str,
                 sandbox_image: str = "", cgroups: Any = None, cluster_dns: tuple[str, ...] = (),
                 cluster_domain: str = "cluster.local", resolv_conf: str = "/etc/resolv.conf",
                 sources: ContainerSources | None = None,
                 runtime_handler: Callable[[Mapping[str, Any]], Awaitable[str]] | None = None,
                 cpuset_of: Callable[[Mapping[str, Any], Mapping[str, Any]], str] | None = None,
                 on_created: Callable[[str, str], None] | None = None,
                 active_pods: Callable[[], list[dict[str, Any]]] | None = None,
                 starts: StartSlots | None = None) -> None:
        self.cri = cri
        self.starts = starts or StartSlots(0)  # --max-parallel-pod-starts: pods in their start at once
        # The kubelet's active pods (admitted, not terminal): what the burstable QoS cgroup's shares sum.
        self.active_pods = active_pods
        # The CPU manager: a container's cpuset.cpus ("" for none) and who hears of the cpuset it got.
        self.cpuset_of = cpuset_of
        self.on_created = on_created
        self.sources: ContainerSources = sources or Standalone()  # env and pull secrets (envvars, secrets)
        # RuntimeClass → CRI handler (the agent looks the class up through the API); None: the default.
        self.runtime_handler = runtime_handler
        # The runtime's recursive read-only mounts (its CRI Status), read at the first sync.
        self.rro_supported = False
        self._features_read = False
        self.cluster_dns = list(cluster_dns)  # kubelet --cluster-dns: the kube-dns Service IP(s)
        self.cluster_domain = cluster_domain
        self.resolv_conf = resolv_conf  # kubelet --resolv-conf: the host's file (Default, the search line)
        self.volumes = volumes
        self.recorder = recorder
        self.clock = clock
        self.log_root = log_root
        self.cgroup_root = cgroup_root
        self.memory_capacity = memory_capacity
        self.runtime_name = runtime_name
        self.sandbox_image = sandbox_image
        self.cgroups = cgroups  # the runtime's cgroup driver (kernel.cgroups), for pod cgroup removal
        self.crash_backoff = CrashLoopBackoff(clock)
        self.pull_backoff = ImagePullBackoff(clock)
        self.sync_errors: dict[str, dict[str, SyncError]] = {}  # pod uid → container → why it could not start

    # -- runtime state ----------------------------------------------------------------------------
    async def state(self, pod: Mapping[str, Any]) -> PodRuntimeState:
        uid = uid_of(pod)
        sandboxes = await self.cri.list_pod_sandbox(label_selector={POD_UID_LABEL: uid})
        records = []
        for c in await self.cri.list_containers(label_selector={POD_UID_LABEL: uid}):
            try:
                st = (await self.cri.container_status(c.id)).status
            except Exception as e:
                if is_not_found(e):
                    continue
                raise
            rec = self._record(st)
            if st.state == pb.CONTAINER_EXITED:
                rec = await asyncio.to_thread(_with_termination_message, rec, st)
            records.append(rec)
        ips: list[str] = []
        ready = False
        latest = max(sandboxes, key=lambda s: s.created_at, default=None)
        if latest is not None and latest.state == pb.SANDBOX_READY:
            ready = True
            try:
                net = (await self.cri.pod_sandbox_status(latest.id)).status.network
                ips = [ip for ip in [net.ip, *(a.ip for a in net.additional_ips)] if ip]
            except Exception as e:  # a ready sandbox keeps its addresses: report the last known ones
                log.debug("sandbox status of %s: %s; keeping the pod's last known IPs", latest.id, e)
                ips = [p.get("ip", "") for p in (pod.get("status") or {}).get("podIPs") or [] if p.get("ip")]
        return PodRuntimeState(sandboxes, records, ips, ready)

    def _record(self, st: pb.ContainerStatus) -> ContainerRecord:
        try:
            h = int(st.annotations.get(HASH_ANNOTATION, "0"), 16)
        except ValueError:
            h = 0
        return ContainerRecord(
            name=st.metadata.name, id=st.id, state=_STATE.get(st.state, "unknown"),
            attempt=st.metadata.attempt, created_at=st.created_at / 1e9, started_at=st.started_at / 1e9,
            finished_at=st.finished_at / 1e9, exit_code=st.exit_code, reason=st.reason, message=st.message,
            image=st.image.image, image_id=st.image_ref, hash=h, runtime=self.runtime_name)

    # -- sync -------------------------------------------------------------------------------------
    async def sync(self, pod: Mapping[str, Any], liveness_failed: set[str] | None = None,
                   startup_failed: set[str] | None = None) -> PodRuntimeState:
        """Move the runtime one step towards the pod's spec; returns the state after the step."""
        uid = uid_of(pod)
        await self._runtime_features()
        st = await self.state(pod)
        boxes = [SandboxRecord(s.id, s.state == pb.SANDBOX_READY, s.metadata.attempt, s.created_at / 1e9)
                 for s in st.sandboxes]
        actions = compute_pod_actions(pod, boxes, st.records, liveness_failed=liveness_failed or set(),
                                      startup_failed=startup_failed or set())
        errors = self.sync_errors.setdefault(uid, {})
        if actions.kill_pod:
            await self._kill_all(pod, st, grace=0, reason_events=False)
            if not actions.create_sandbox:
                return await self.state(pod)
        for cid, info in actions.containers_to_kill.items():
            self.recorder.record(pod, "Normal", "Killing", info.message or f"Stopping container {info.name}")
            await self._stop_container(cid, _grace(pod), pod, info.name)
        to_start = (actions.init_containers_to_start + actions.ephemeral_to_start
                    + actions.containers_to_start)
        if not (actions.create_sandbox or to_start):
            if not actions.kill_pod:
                try:  # re-project configMap/secret/downwardAPI contents (atomic swaps; no-op when unchanged)
                    changed = await run_to_completion(self.volumes.update_pod, pod)
                    if changed:
                        log.info("pod %s: volumes %s updated", pod_name(pod), ", ".join(changed))
                except VolumeError as e:
                    self.recorder.record(pod, "Warning", "FailedMount", e.event_message)
            return await self.state(pod)
        async with self.starts.slot(uid):
            try:
                vols = await self._setup_volumes(pod)
            except VolumeError as e:
                # The pod waits in ContainerCreating; the worker retries while containers are waiting.
                self.recorder.record(pod, "Warning", e.reason, e.event_message)
                return st
            early = await self._create_and_start(pod, actions, st, vols, to_start, errors)
        return early if early is not None else await self.state(pod)

    async def _setup_volumes(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """The pod's volumes, set up on a worker thread; one that takes longer than SLOW_VOLUME_SETUP gives
        the pod's start slot back while it finishes (a hung mount never holds one)."""
        if not self.starts.limit:  # no slots to give back
            return await run_to_completion(self.volumes.setup_pod, pod)
        task = asyncio.ensure_future(run_to_completion(self.volumes.setup_pod, pod))
        try:
            done, _ = await asyncio.wait({task}, timeout=SLOW_VOLUME_SETUP)
            if done:
                return task.result()
            async with self.starts.released(uid_of(pod)):
                return await task
        except asyncio.CancelledError:
            task.cancel()
            await finish(task)  # what the set-up made exists before the caller's cleanup runs
            raise

    async def _create_and_start(self, pod: Mapping[str, Any], actions: PodActions, st: PodRuntimeState,
                                vols: dict[str, Any], to_start: list[str],
                                errors: dict[str, SyncError]) -> PodRuntimeState | None:
        """The pod's new sandbox (if it needs one) and the containers it starts, under a start slot;
        the state to return at once when it stops early (None: carry on)."""
        uid = uid_of(pod)
        sid = "" if actions.create_sandbox else actions.sandbox_id
        if actions.create_sandbox:
            for old in st.sandboxes:
                await self._remove_sandbox(old.id)
            sandbox_cfg = self.sandbox_config(pod, actions.attempt)  # the containers' too: made once
            for warning in self.dns_warnings(pod):
                self.recorder.record(pod, "Warning", "DNSConfigForming", warning)
            if (pod.get("spec") or {}).get("hostUsers") is False:
                # UserNamespacesSupport: the runtime handler must support user namespaces; ours does not.
                self.recorder.record(pod, "Warning", "FailedCreatePodSandBox",
                                     "Failed to create pod sandbox: RuntimeClass handler \"\" does not "
                                     "support user namespaces")
                return st
            handler = ""
            if self.runtime_handler is not None:
                try:
                    handler = await self.runtime_handler(pod)
                except LookupError as e:
                    self.recorder.record(pod, "Warning", "FailedCreatePodSandBox",
                                         f"Failed to create pod sandbox: {e}")
                    return st
            if self.cgroups is not None:
                active = self.active_pods() if self.active_pods is not None else None
                await asyncio.to_thread(self._make_pod_cgroup, pod, active)
            sid = await self.cri.run_pod_sandbox(sandbox_cfg, handler)
            if st.sandboxes or st.records:
                st = await self.state(pod)
            else:  # the pod's first sandbox: only its addresses are new (kubelet asks PodSandboxStatus)
                st = dataclasses.replace(st, pod_ips=await self._sandbox_ips(sid), sandbox_ready=True)
            new_ips: list[str] | None = st.pod_ips
        else:
            new_ips = None
            sandbox_cfg = self.sandbox_config(pod, actions.attempt)
        spec = pod.get("spec") or {}
        by_name = {c["name"]: c for f in ("initContainers", "ephemeralContainers", "containers")
                   for c in spec.get(f) or []}
        latest = latest_records(st.records)
        if to_start:
            vols = {**vols, **await asyncio.to_thread(self._pod_files, pod, st.pod_ips)}
        for name in to_start:
            c = by_name[name]
            prev = latest.get(name)
            if prev is not None and prev.state == "exited":
                decision = self.crash_backoff.check(pod, c, prev.finished_at)
                if decision.in_backoff:
                    errors[name] = SyncError("CrashLoopBackOff", decision.message)
                    who = f"{pod['metadata']['name']}_{pod['metadata'].get('namespace')}({uid})"
                    self.recorder.record(pod, "Warning", "BackOff",
                                         f"Back-off restarting failed container {name} in pod {who}")
                    continue
            try:
                await self._start_container(pod, sid, sandbox_cfg, c,
                                            0 if prev is None else prev.attempt + 1, vols, new_ips)
                errors.pop(name, None)
                # Older exited instances stay for container GC (kubelet's gc.containers, by its policy).
            except _StartError as e:
                errors[name] = SyncError(e.reason, e.message)
            if name in actions.init_containers_to_start:
                break  # one init container at a time: the next sync (PLEG) starts the next
        return None

    async def _runtime_features(self) -> None:
        """What the runtime's default handler supports (kubelet reads the handlers from CRI Status)."""
        if self._features_read:
            return
        with contextlib.suppress(Exception):
            st = await self.cri.status()
            h = next((h for h in st.runtime_handlers if h.name == ""), None)
            self.rro_supported = h is not None and h.features.recursive_read_only_mounts
            self._features_read = True

    async def _image(self, image: str) -> pb.Image | None:
        """The runtime's image by that reference, or None when it does not have it."""
        r = await self.cri.image_status(image)
        return r.image if r.HasField("image") and r.image.id else None

    async def _ensure_image(self, pod: Mapping[str, Any], c: Mapping[str, Any]) -> str:
        """EnsureImageExists: pull `c["image"]` as `c["imagePullPolicy"]` says, with kubelet's events and
        back-off; the runtime's reference to the image (what an image volume's CRI mount names)."""
        return (await self._ensure_image_status(pod, c))[0]

    async def _ensure_image_status(self, pod: Mapping[str, Any],
                                   c: Mapping[str, Any]) -> tuple[str, pb.Image | None]:
        """`_ensure_image`, with the image's status as the runtime reported it (None if it did not)."""
        image = c.get("image", "")
        present = await self._image(image)
        decision = image_policy.pull_decision(c, present is not None)
        if decision.error_reason:
            self.recorder.record(pod, "Warning", decision.error_reason, decision.message)
            raise _StartError(decision.error_reason, decision.message)
        if not decision.pull:
            self.recorder.record(pod, "Normal", "Pulled", decision.message)
            return (present.id if present is not None else image), present
        bo = self.pull_backoff.check(pod, image)
        if bo.in_backoff:
            raise _StartError("ImagePullBackOff", bo.message)
        self.recorder.record(pod, "Normal", "Pulling", image_policy.pulling_message(image))
        t0 = self.clock.now()
        try:
            async with self.starts.released(uid_of(pod)):  # a pull waits on the network, not the CPU
                ref = await pull_with_credentials(self.cri, self.sources, self.recorder, pod, image)
        except Exception as e:
            self.pull_backoff.failed(pod, image)
            reason, msg = image_policy.pull_failed(image, _details(e))
            self.recorder.record(pod, "Warning", "Failed", msg)
            raise _StartError(reason, msg) from e
        self.pull_backoff.succeeded(pod, image)
        took = self.clock.now() - t0
        img = await self._image(image)
        self.recorder.record(pod, "Normal", "Pulled",
                             image_policy.pulled_message(image, took, took, img.size if img else 0))
        return ref or image, img

    async def _image_volumes(self, pod: Mapping[str, Any], c: Mapping[str, Any],
                             vols: Mapping[str, Any]) -> Mapping[str, Any]:
        """The image volumes the container mounts, each pulled by its own pullPolicy (kubelet's
        getImageVolumes) and carrying the runtime's reference to its image."""
        mounted = {vm.get("name") for vm in c.get("volumeMounts") or []}
        out = dict(vols)
        for name, v in vols.items():
            if v.kind == "image" and name in mounted:
                ref = await self._ensure_image(pod, {"image": v.image, "imagePullPolicy": v.pull_policy})
                out[name] = dataclasses.replace(v, image_ref=ref)
        return out

    async def _start_container(self, pod: Mapping[str, Any], sid: str, sandbox_cfg: pb.PodSandboxConfig,
                               c: Mapping[str, Any], attempt: int, vols: Mapping[str, Any],
                               pod_ips: list[str] | None = None) -> None:
        """`pod_ips`: the sandbox's addresses when the caller just asked the runtime for them."""
        _, img = await self._ensure_image_status(pod, c)  # its User, for runAsNonRoot
        vols = await self._image_volumes(pod, c, vols)
        try:
            ips = pod_ips if pod_ips is not None else await self._sandbox_ips(sid)
            env = await self.sources.environment(pod, c, ips)
            bind = functools.partial(self.volumes.bind_sub_path, uid_of(pod))
            sub_paths = await run_to_completion(prepare_sub_paths, c, vols, env, bind)
        except EnvError as e:
            self.recorder.record(pod, "Warning", "Failed", f"Error: {e}")
            raise _StartError("CreateContainerConfigError", str(e)) from e
        for warning in env.warnings:
            self.recorder.record(pod, "Warning", "InvalidEnvironmentVariableNames", warning)
        try:
            security.verify_run_as_non_root(pod, c, *_image_user(img))
            cfg = self.container_config(pod, c, attempt, vols, env, sub_paths)
            # the container's log dir, off the loop (a mkdir waits on the filesystem's journal under load)
            await asyncio.to_thread((self.pod_log_dir(pod) / c["name"]).mkdir, parents=True, exist_ok=True)
            if c.get("targetContainerName"):
                await self._target_pid_namespace(pod, c["targetContainerName"], cfg)
            if c.get("terminationMessagePath"):
                path = await asyncio.to_thread(pod_files.termination_message_file,
                                               self.volumes.pod_dir(uid_of(pod)), c["name"])
                cfg.mounts.add(container_path=c["terminationMessagePath"], host_path=str(path))
            cid = await self.cri.create_container(sid, cfg, sandbox_cfg)
            if self.on_created is not None:
                self.on_created(cid, cfg.linux.resources.cpuset_cpus)
        except security.ConfigError as e:
            self.recorder.record(pod, "Warning", "Failed", f"Error: {e}")
            raise _StartError("CreateContainerConfigError", str(e)) from e
        except Exception as e:
            msg = _details(e)
            self.recorder.record(pod, "Warning", "Failed", f"Error: {msg}")
            raise _StartError("CreateContainerError", msg) from e
        self.recorder.record(pod, "Normal", "Created", f"Created container {c['name']}")
        try:
            await self.cri.start_container(cid)
        except Exception as e:
            msg = _details(e)
            self.recorder.record(pod, "Warning", "Failed", f"Error: {msg}")
            raise _StartError("RunContainerError", msg) from e
        self.recorder.record(pod, "Normal", "Started", f"Started container {c['name']}")
        hook = (c.get("lifecycle") or {}).get("postStart")
        if not hook:
            return
        async with self.starts.released(uid_of(pod)):  # the hook's own time is not the kubelet's work
            hook_ok = await self._run_hook(pod, c, cid, hook, "PostStart", POST_START_TIMEOUT)
        if not hook_ok:
            # kubelet: a failed postStart hook kills the container; the restart policy decides what follows.
            await self._stop_container(cid, _grace(pod))
            raise _StartError("PostStartHookError", f"PostStartHook failed for container {c['name']}")

    async def _sandbox_ips(self, sid: str) -> list[str]:
        """The pod's IPs from its sandbox (for status.podIP(s) in the environment)."""
        try:
            net = (await self.cri.pod_sandbox_status(sid)).status.network
        except Exception as e:
            if is_not_found(e):
                return []
            raise
        return [ip for ip in [net.ip, *(a.ip for a in net.additional_ips)] if ip]

    async def _target_pid_namespace(self, pod: Mapping[str, Any], target: str,
                                    cfg: pb.ContainerConfig) -> None:
        """An ephemeral container's targetContainerName: the pid namespace of that running container (CRI
        TARGET), unless the pod shares one pid namespace anyway."""
        nso = cfg.linux.security_context.namespace_options
        if nso.pid != pb.CONTAINER:
            return
        rec = latest_records((await self.state(pod)).records).get(target)
        if rec is None or rec.state != "running":
            raise security.ConfigError(f"target container {target} is not running")
        nso.pid = pb.TARGET
        nso.target_id = rec.id

    async def _run_hook(self, pod: Mapping[str, Any], c: Mapping[str, Any], cid: str, hook: Mapping[str, Any],
                        kind: str, timeout_s: int) -> bool:
        """Run a lifecycle hook (kubelet's handlers.go: exec in the container, httpGet, sleep); False, with a
        Failed<kind>Hook event, when it failed."""
        if "httpGet" in hook:
            return await self._http_hook(pod, c, hook["httpGet"], kind, timeout_s)
        if "sleep" in hook:
            await asyncio.sleep(min(float((hook.get("sleep") or {}).get("seconds") or 0), timeout_s))
            return True
        if "exec" not in hook:
            self.recorder.record(pod, "Warning", f"Failed{kind}Hook",
                                 f"{kind} hook of container {c['name']}: no exec, httpGet or sleep handler")
            return False
        cmd = list((hook.get("exec") or {}).get("command") or [])
        try:
            r = await self.cri.exec_sync(cid, cmd, timeout_s)
            ok, out = r.exit_code == 0, (r.stdout + r.stderr).decode(errors="replace")
        except Exception as e:
            ok, out = False, _details(e)
        if not ok:
            self.recorder.record(pod, "Warning", f"Failed{kind}Hook",
                                 f"Exec lifecycle hook ({cmd}) for Container \"{c['name']}\" in Pod "
                                 f"\"{pod_name(pod)}\" failed - error: {out.strip()[:200]}")
        return ok

    async def _http_hook(self, pod: Mapping[str, Any], c: Mapping[str, Any], g: Mapping[str, Any], kind: str,
                         timeout_s: int) -> bool:
        """GET as kubelet's runHTTPHandler: host defaults to the pod IP; any answer, whatever its status, is
        success; only a request that cannot be made fails the hook."""
        import aiohttp

        from nodeagent.kubelet.prober import USER_AGENT, format_url, resolve_port

        host = g.get("host") or next(iter((await self.state(pod)).pod_ips), "")
        try:
            url = format_url(g.get("scheme") or "HTTP", host, resolve_port(g["port"], c),
                             g.get("path") or "/")
            headers = {"User-Agent": USER_AGENT.replace("kube-probe", "kube-lifecycle"),
                       **{h["name"]: h.get("value", "") for h in g.get("httpHeaders") or []}}
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session, \
                    session.get(url, headers=headers, ssl=False) as resp:
                await resp.read()
            return True
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
            self.recorder.record(pod, "Warning", f"Failed{kind}Hook",
                                 f"HTTP lifecycle hook ({g.get('path') or '/'}) for Container "
                                 f"\"{c['name']}\" in Pod \"{pod_name(pod)}\" failed - error: {e}")
            return False

    # -- configs ----------------------------------------------------------------------------------
    def pod_log_dir(self, pod: Mapping[str, Any]) -> Path:
        m = pod.get("metadata") or {}
        return self.log_root / f"{m.get('namespace', 'default')}_{m.get('name', '')}_{m.get('uid', '')}"

    def cgroup_parent(self, pod: Mapping[str, Any]) -> str:
        return resources.pod_cgroup(pod, self.cgroup_root).cgroupfs()

    def _make_pod_cgroup(self, pod: Mapping[str, Any], active: list[dict[str, Any]] | None) -> None:
        """As kubelet's syncPod (blocking: a worker thread): a pod whose cgroup does not exist yet first
        updates the QoS cgroups, itself among the active pods, then gets its own cgroup with its limits."""
        path = self.cgroup_parent(pod)
        if active is not None and not self.cgroups.exists(path):
            if all(uid_of(p) != uid_of(pod) for p in active):
                active = [*active, dict(pod)]
            update_qos_cgroups(self.cgroups, self.cgroup_root, active)
        ensure_pod_cgroup(self.cgroups, path, resources.pod_resource_config(pod))

    def sandbox_config(self, pod: Mapping[str, Any], attempt: int) -> pb.PodSandboxConfig:
        m = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        host_net = bool(spec.get("hostNetwork"))
        hostname = "" if host_net else pod_files.kernel_hostname(pod, self.cluster_domain)
        cfg = pb.PodSandboxConfig(hostname=hostname,
                                  log_directory=str(self.pod_log_dir(pod)))
        cfg.metadata.name, cfg.metadata.namespace = m.get("name", ""), m.get("namespace", "default")
        cfg.metadata.uid, cfg.metadata.attempt = m.get("uid", ""), attempt
        cfg.labels.update({k: str(v) for k, v in (m.get("labels") or {}).items()})
        cfg.labels.update({POD_UID_LABEL: m.get("uid", ""), POD_NAME_LABEL: m.get("name", ""),
                           POD_NAMESPACE_LABEL: m.get("namespace", "default")})
        cfg.annotations.update({k: str(v) for k, v in (m.get("annotations") or {}).items()})
        cfg.linux.cgroup_parent = self.cgroup_parent(pod)
        rc = self._resolv_conf(pod)
        cfg.dns_config.servers.extend(rc.nameservers)
        cfg.dns_config.searches.extend(rc.searches)
        cfg.dns_config.options.extend(rc.options)
        nso = cfg.linux.security_context.namespace_options
        nso.network = pb.NODE if host_net else pb.POD
        nso.pid = (pb.NODE if spec.get("hostPID")
                   else pb.POD if spec.get("shareProcessNamespace") else pb.CONTAINER)
        nso.ipc = pb.NODE if spec.get("hostIPC") else pb.POD
        security.apply_sandbox(pod, cfg)
        for c in spec.get("containers") or []:
            for p in c.get("ports") or []:
                if p.get("hostPort"):
                    cfg.port_mappings.add(container_port=p["containerPort"], host_port=p["hostPort"],
                                          protocol=pb.Protocol.Value(p.get("protocol", "TCP")),
                                          host_ip=p.get("hostIP", ""))
        return cfg

    def _pod_files(self, pod: Mapping[str, Any], pod_ips: list[str]) -> dict[str, Any]:
        """The kubelet's managed /etc/hosts for the pod's containers (a blocking write: a worker thread).
        The kubelet mounts it once the pod has IPs (a hostNetwork pod: the node's hosts file)."""
        if not pod_ips and not (pod.get("spec") or {}).get("hostNetwork"):
            return {}
        from nodeagent.kubelet.volumes.manager import Volume

        path = pod_files.ensure_hosts_file(self.volumes.pod_dir(uid_of(pod)), pod, pod_ips,
                                           self.cluster_domain)
        # Keyed by its mount path, which no volume name can be.
        return {pod_files.ETC_HOSTS: Volume(pod_files.HOSTS_MOUNT_NAME, "hosts", str(path))}

    def _resolv_conf(self, pod: Mapping[str, Any]) -> ResolvConf:
        """The pod's resolv.conf by dnsPolicy (the runtime writes it from the sandbox's dns_config)."""
        return pod_resolv_conf(pod, self.cluster_dns, self.cluster_domain, _read_text(self.resolv_conf))

    def dns_warnings(self, pod: Mapping[str, Any]) -> list[str]:
        """What the kubelet reports as DNSConfigForming events (limits exceeded, no cluster DNS)."""
        return self._resolv_conf(pod).warnings

    def container_config(self, pod: Mapping[str, Any], c: Mapping[str, Any], attempt: int,
                         vols: Mapping[str, Any], env: Env | None = None,
                         sub_paths: Mapping[int, str] | None = None) -> pb.ContainerConfig:
        """sub_paths: the bound host path of each volumeMount (by index) with a subPath."""
        m = pod.get("metadata") or {}
        cfg = pb.ContainerConfig(command=c.get("command") or [], args=c.get("args") or [],
                                 working_dir=c.get("workingDir", ""), log_path=f"{c['name']}/{attempt}.log",
                                 stdin=bool(c.get("stdin")), stdin_once=bool(c.get("stdinOnce")),
                                 tty=bool(c.get("tty")))
        cfg.metadata.name, cfg.metadata.attempt = c["name"], attempt
        cfg.image.image = c.get("image", "")
        apply_env(cfg, c, env)
        cfg.labels.update({POD_UID_LABEL: m.get("uid", ""), POD_NAME_LABEL: m.get("name", ""),
                           POD_NAMESPACE_LABEL: m.get("namespace", "default"),
                           CONTAINER_NAME_LABEL: c["name"]})
        cfg.annotations[HASH_ANNOTATION] = f"{container_hash(c):x}"
        for i, vm in enumerate(c.get("volumeMounts") or []):
            v = vols.get(vm["name"])
            if v is None:
                continue
            if v.kind == "image":  # KEP-4639: the runtime mounts the image, read-only; subPath within it
                image = pb.ImageSpec(image=v.image_ref or v.image)
                cfg.mounts.add(container_path=vm["mountPath"], image=image,
                               image_sub_path=vm.get("subPath", ""), readonly=True)
                continue
            host = v.host_path
            sub = sub_path(vm, env)
            if sub:
                host = (sub_paths or {}).get(i) or os.path.join(host, sub)
            m = cfg.mounts.add(container_path=vm["mountPath"], host_path=host,
                               readonly=bool(vm.get("readOnly")) or v.read_only)
            pod_files.mount_options(vm, m, self.rro_supported)
        for d in c.get("volumeDevices") or []:  # makeBlockVolumes
            v = vols.get(d.get("name", ""))
            if v is not None and v.block:
                cfg.devices.add(container_path=d["devicePath"], host_path=v.host_path,
                                permissions="r" if v.read_only else "mrw")
        r = resources.container_resources(pod, c, self.memory_capacity)
        lr = cfg.linux.resources
        lr.cpu_shares = r["cpu_shares"]
        lr.memory_limit_in_bytes = r["memory_limit_in_bytes"]
        lr.oom_score_adj = r["oom_score_adj"]
        lr.cpu_period = r.get("cpu_period", 0)
        lr.cpu_quota = r.get("cpu_quota", 0)
        if self.cpuset_of is not None:
            lr.cpuset_cpus = self.cpuset_of(pod, c)
        lsc = cfg.linux.security_context
        security.apply_container(pod, c, lsc)
        hosts = vols.get(pod_files.ETC_HOSTS)
        if hosts is not None and pod_files.wants_hosts_mount(c):
            cfg.mounts.add(container_path=pod_files.ETC_HOSTS, host_path=hosts.host_path)
        if c.get("terminationMessagePath"):
            cfg.annotations[pod_files.MESSAGE_PATH_ANNOTATION] = c["terminationMessagePath"]
        cfg.annotations[pod_files.MESSAGE_POLICY_ANNOTATION] = c.get("terminationMessagePolicy") or "File"
        spec = pod.get("spec") or {}
        nso = lsc.namespace_options
        nso.network = pb.NODE if spec.get("hostNetwork") else pb.POD
        nso.pid = (pb.NODE if spec.get("hostPID")
                   else pb.POD if spec.get("shareProcessNamespace") else pb.CONTAINER)
        nso.ipc = pb.NODE if spec.get("hostIPC") else pb.POD
        return cfg

    # -- kill -------------------------------------------------------------------------------------
    async def kill(self, pod: Mapping[str, Any], grace: int) -> None:
        """Stop every container with the grace period, then remove containers, sandboxes and volumes."""
        st = await self.state(pod)
        await self._kill_all(pod, st, grace, reason_events=True)
        for c in st.records:
            with contextlib.suppress(Exception):
                await self.cri.remove_container(c.id)
        for s in st.sandboxes:
            await self._remove_sandbox(s.id)
        await run_to_completion(self.volumes.teardown_pod, uid_of(pod))
        await asyncio.to_thread(self._remove_pod_cgroup, pod)
        uid = uid_of(pod)
        self.sync_errors.pop(uid, None)
        for c in ((pod.get("spec") or {}).get("containers") or []):
            self.crash_backoff.backoff.reset(container_backoff_key(pod, c))

    async def kill_containers(self, pod: Mapping[str, Any], grace: int | None = None) -> None:
        """A pod in a terminal phase: stop what still runs and its sandbox (freeing its IP); keep the
        records."""
        st = await self.state(pod)
        if any(r.state == "running" for r in st.records) or st.sandbox_ready:
            await self._kill_all(pod, st, _grace(pod) if grace is None else grace, reason_events=True)
            st = await self.state(pod)
        if not any(r.state == "running" for r in st.records):
            # nothing runs any more: its volumes are unmounted (and detached) now, not at deletion
            if await run_to_completion(self.volumes.unmount_volumes, uid_of(pod)):
                log.info("pod %s: terminated, its volumes unmounted", pod_name(pod))

    def _remove_pod_cgroup(self, pod: Mapping[str, Any]) -> None:
        """The pod's cgroup goes with the pod. Our runtime removes the parents it made itself; runc under
        containerd leaves them, as the kubelet owns pod cgroups there."""
        if self.cgroups is None:
            return
        try:
            remove_cgroup(self.cgroups, self.cgroup_parent(pod))
        except OSError as e:
            log.warning("pod %s: cgroup %s not removed: %s", pod_name(pod), self.cgroup_parent(pod), e)

    async def _kill_all(self, pod: Mapping[str, Any], st: PodRuntimeState, grace: int,
                        reason_events: bool) -> None:
        running = [r for r in st.records if r.state == "running"]
        for r in running:
            if reason_events:
                self.recorder.record(pod, "Normal", "Killing", f"Stopping container {r.name}")
        # Native sidecars stop after everything else, the last-declared first (kubelet's termination order).
        sidecars = [c["name"] for c in (pod.get("spec") or {}).get("initContainers") or []
                    if c.get("restartPolicy") == "Always"]
        await asyncio.gather(*(self._stop_container(r.id, grace, pod, r.name) for r in running
                               if r.name not in sidecars))
        for name in reversed(sidecars):
            await asyncio.gather(*(self._stop_container(r.id, grace, pod, r.name) for r in running
                                   if r.name == name))
        for s in st.sandboxes:
            if s.state == pb.SANDBOX_READY:
                with contextlib.suppress(Exception):
                    await self.cri.stop_pod_sandbox(s.id)

    async def _stop_container(self, cid: str, grace: int, pod: Mapping[str, Any] | None = None,
                              name: str = "") -> None:
        """preStop hook (within the grace period), then StopContainer: SIGTERM, SIGKILL after what is left."""
        spec = _container_spec(pod, name) if pod is not None else None
        hook = ((spec or {}).get("lifecycle") or {}).get("preStop")
        if hook and grace > 0 and pod is not None and spec is not None:
            t0 = self.clock.now()
            await self._run_hook(pod, spec, cid, hook, "PreStop", grace)
            grace = max(MIN_GRACE_AFTER_HOOK, grace - int(self.clock.now() - t0))
        try:
            await self.cri.stop_container(cid, grace)
        except Exception as e:
            if not is_not_found(e):
                log.warning("stop container %s: %s", cid[:12], e)

    async def _remove_sandbox(self, sid: str) -> None:
        for fn in (self.cri.stop_pod_sandbox, self.cri.remove_pod_sandbox):
            try:
                await fn(sid)
            except Exception as e:
                if not is_not_found(e):
                    log.warning("%s %s: %s", fn.__name__, sid[:12], e)

    # -- status -----------------------------------------------------------------------------------
    def pod_status(self, pod: Mapping[str, Any], st: PodRuntimeState, host_ips: list[str],
                   ready: Mapping[str, bool] | None = None, started: Mapping[str, bool] | None = None,
                   terminal: bool = False) -> dict[str, Any]:
        return generate_pod_status(pod, st.records, now=self.clock.now(),
                                   sync_errors=self.sync_errors.get(uid_of(pod)), ready=ready,
                                   started=started, pod_ips=st.pod_ips, host_ips=host_ips,
                                   sandbox_ready=st.sandbox_ready, pod_is_terminal=terminal)


class _StartError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


POST_START_TIMEOUT = 30
# a pod's volume set-up taking longer than this gives its start slot back until it is done (seconds)
SLOW_VOLUME_SETUP = 1.0
MIN_GRACE_AFTER_HOOK = 2  # kubelet gives SIGTERM at least this long after a preStop hook


def _container_spec(pod: Mapping[str, Any] | None, name: str) -> Mapping[str, Any] | None:
    spec = (pod or {}).get("spec") or {}
    return next((c for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
                 if c.get("name") == name), None)


def _grace(pod: Mapping[str, Any]) -> int:
    m = pod.get("metadata") or {}
    if m.get("deletionGracePeriodSeconds") is not None:
        return int(m["deletionGracePeriodSeconds"])
    g = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return 30 if g is None else int(g)


def termination_grace(pod: Mapping[str, Any]) -> int:
    return _grace(pod)




def _image_user(img: pb.Image | None) -> tuple[int | None, str]:
    """kubelet getImageUser: the image's uid, else its user name; an image that says neither runs as root."""
    if img is not None and img.HasField("uid"):
        return img.uid.value, ""
    if img is not None and img.username:
        return None, img.username
    return 0, ""


def _with_termination_message(rec: ContainerRecord, st: pb.ContainerStatus) -> ContainerRecord:
    """An exited container's record with the message it left (kuberuntime getTerminationMessage): the
    runtime's message, then ": ", then the file at terminationMessagePath, or the log's tail under
    FallbackToLogsOnError after a failure."""
    fallback = (st.annotations.get(pod_files.MESSAGE_POLICY_ANNOTATION) == "FallbackToLogsOnError"
                and st.exit_code != 0 and st.reason != "ContainerCannotRun")
    msg = pod_files.termination_message([(m.container_path, m.host_path) for m in st.mounts],
                                        st.annotations.get(pod_files.MESSAGE_PATH_ANNOTATION, ""), fallback,
                                        st.log_path)
    if not msg:
        return rec
    return dataclasses.replace(rec, message=f"{rec.message}: {msg}" if rec.message else msg)


_read_cache: dict[str, tuple[tuple[int, int, int], str]] = {}


def _read_text(path: str) -> str:
    """The host's resolv.conf, as the kubelet reads it for each sandbox config: read again only when the
    file changed (one stat per call: a burst of pods asks three times per pod, on the event loop)."""
    try:
        st = os.stat(path)
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = _read_cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        with open(path) as f:
            text = f.read()
    except OSError:
        return ""
    _read_cache[path] = (key, text)
    return text


def _details(e: BaseException) -> str:
    """A gRPC error's details, or the exception's text."""
    details = getattr(e, "details", None)
    return details() if callable(details) else str(e)
