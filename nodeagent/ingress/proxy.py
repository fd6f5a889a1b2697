"""HAProxy, run and supervised: started in master-worker mode, restarted with backoff when it dies, fed a
rendered configuration that is validated (`haproxy -c`) before it replaces the running one.

A new structure is a graceful reload (SIGUSR2 to the master: a new worker takes the listening sockets
over the admin socket's `expose-fd listeners`, the old one finishes its connections); a change of
endpoints alone goes through the runtime API (`set server … addr/weight/state`), with no new process.
A configuration that does not validate is never installed: the last good one keeps serving and the
error is returned to the caller. The master gets SIGKILL when this process dies (`setpriv --pdeathsig`),
and its workers leave with it, so a killed agent leaves no proxy behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

from kernel.fs import atomic_write
from nodeagent.ingress.haproxy import Files, Rendered, Slot

log = logging.getLogger("nodeagent.ingress.haproxy")

BACKOFF_FIRST = 0.5
BACKOFF_MAX = 30.0
STOP_GRACE = 5.0
WORKER_WAIT = 10.0


class InvalidConfig(Exception):
    """`haproxy -c` refused a render: what it said."""


class ProxyDown(Exception):
    """The proxy is not running (it died and is being restarted)."""


class HAProxy:
    """One supervised HAProxy master. `run()` owns the process (start it in the component's TaskGroup);
    `apply()` installs a render."""

    def __init__(self, binary: str, work_dir: str | Path) -> None:
        self.binary = binary
        self.dir = Path(work_dir)
        self.config = self.dir / "haproxy.cfg"
        self.files = Files(admin_socket=str(self.dir / "admin.sock"),
                           default_certificate=str(self.dir / "default.pem"),
                           crt_list=str(self.dir / "certs.list"))
        self.current: Rendered | None = None  # what the running proxy serves
        self.reloads = 0
        self.runtime_updates = 0
        self.restarts = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._installed = asyncio.Event()  # a first valid config exists: run() may start
        self._running = asyncio.Event()
        self._lock = asyncio.Lock()
        if len(self.files.admin_socket.encode()) > 107:
            raise ValueError(f"ingress: {self.files.admin_socket} is too long for a unix socket "
                             "(use a shorter data dir)")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc and self._proc.returncode is None else None

    def cert_path(self, name: str, pem: bytes) -> str:
        """Where a certificate lives: named by its contents, so a rotated Secret is a new structure."""
        return str(self.dir / "certs" / f"{name}-{hashlib.sha256(pem).hexdigest()[:12]}.pem")

    # -- installing a render ---------------------------------------------------------------------------

    async def apply(self, rendered: Rendered, certificates: dict[str, bytes]) -> str:
        """Make the proxy serve `rendered` ('unchanged', 'runtime', 'reloaded' or 'installed' when it
        is not running yet); InvalidConfig leaves the running proxy and its files as they were."""
        async with self._lock:
            # the crt-list is a file of its own: a certificate that arrives or changes alone (a Secret read
            # after its Ingress, a rotated one) changes it and not the config's text
            if self.current is not None and rendered.text == self.current.text and \
                    rendered.crt_list == self.current.crt_list:
                return "unchanged"
            if self.current is not None and rendered.structure == self.current.structure and self.pid:
                if await self._runtime_update(self.current.slots, rendered.slots):
                    await asyncio.to_thread(atomic_write, self.config, rendered.text)
                    self.current = rendered
                    self.runtime_updates += 1
                    return "runtime"
            await asyncio.to_thread(self._write_certs, certificates)
            await self._validate(rendered)
            await asyncio.to_thread(self._install, rendered, set(certificates))
            self.current = rendered
            if not self.pid:
                self._installed.set()
                return "installed"
            await self._reload()
            self.reloads += 1
            return "reloaded"

    def _write_certs(self, certificates: dict[str, bytes]) -> None:
        for path, pem in certificates.items():
            if not Path(path).exists():
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                atomic_write(path, pem, 0o600)

    def _install(self, rendered: Rendered, keep: set[str]) -> None:
        """The validated files in place (the crt-list first: the config names it), old certificates gone."""
        atomic_write(self.files.crt_list, rendered.crt_list)
        atomic_write(self.config, rendered.text)
        d = self.dir / "certs"
        if d.is_dir():
            for f in d.iterdir():
                if str(f) not in keep:
                    f.unlink(missing_ok=True)

    def _write_candidate(self, rendered: Rendered, candidate: Path, crt_list: Path) -> None:
        atomic_write(crt_list, rendered.crt_list)
        atomic_write(candidate, rendered.text.replace(f"crt-list {self.files.crt_list}",
                                                      f"crt-list {crt_list}"))

    async def _validate(self, rendered: Rendered) -> None:
        candidate = self.dir / "haproxy.cfg.new"
        crt_list = self.dir / "certs.list.new"
        await asyncio.to_thread(self._write_candidate, rendered, candidate, crt_list)
        try:
            p = await asyncio.create_subprocess_exec(self.binary, "-c", "-f", str(candidate),
                                                     stdout=asyncio.subprocess.PIPE,
                                                     stderr=asyncio.subprocess.STDOUT)
            out, _ = await p.communicate()
        finally:
            candidate.unlink(missing_ok=True)
            crt_list.unlink(missing_ok=True)
        if p.returncode != 0:
            said = [line for line in out.decode(errors="replace").splitlines() if "[NOTICE]" not in line]
            raise InvalidConfig("\n".join(said).strip() or f"haproxy -c exited {p.returncode}")

    async def _reload(self) -> None:
        """SIGUSR2 to the master, then wait until the new worker answers on the admin socket."""
        before = await self._worker_pid()
        assert self._proc is not None
        self._proc.send_signal(signal.SIGUSR2)
        await self._wait_worker(lambda pid: pid is not None and pid != before)

    async def _runtime_update(self, old: dict[str, tuple[Slot, ...]],
                              new: dict[str, tuple[Slot, ...]]) -> bool:
        """Move every changed slot through the runtime API; False (reload instead) if one is refused."""
        cmds: list[str] = []
        for backend, slots in new.items():
            for i, (was, now) in enumerate(zip(old.get(backend, ()), slots, strict=False), 1):
                if was == now:
                    continue
                server = f"{backend}/s{i}"
                if now is None:
                    cmds.append(f"set server {server} state maint")
                else:
                    cmds += [f"set server {server} addr {now[0]} port {now[1]}",
                             f"set server {server} weight {now[2]}", f"set server {server} state ready"]
        if not cmds:
            return True
        try:
            answer = await self.command(*cmds)
        except (TimeoutError, OSError) as e:
            log.warning("ingress: the runtime API did not answer (%s); reloading instead", e)
            return False
        bad = [line for line in answer.splitlines()
               if line.strip() and not line.startswith(("IP changed", "no need to change", "port changed"))]
        if bad:
            log.warning("ingress: the runtime API refused an endpoint change (%s); reloading instead", bad[0])
            return False
        return True

    async def command(self, *cmds: str) -> str:
        """Runtime API commands on the current worker's admin socket; their answers as one text."""
        r, w = await asyncio.wait_for(asyncio.open_unix_connection(self.files.admin_socket), 5)
        try:
            w.write(("; ".join(cmds) + "\n").encode())
            await w.drain()
            return (await asyncio.wait_for(r.read(), 10)).decode(errors="replace")
        finally:
            w.close()
            with contextlib.suppress(OSError):
                await w.wait_closed()

    async def _worker_pid(self) -> int | None:
        try:
            info = await self.command("show info")
        except (TimeoutError, OSError):
            return None
        for line in info.splitlines():
            if line.startswith("Pid:"):
                return int(line.split(":", 1)[1])
        return None

    async def _wait_worker(self, ok: Callable[[int | None], bool]) -> None:
        loop = asyncio.get_running_loop()
        end = loop.time() + WORKER_WAIT
        while loop.time() < end:
            pid = await self._worker_pid()
            if ok(pid):
                return
            if not self.pid:
                raise ProxyDown("haproxy exited")
            await asyncio.sleep(0.02)
        log.warning("ingress: haproxy's worker did not answer within %.0fs", WORKER_WAIT)

    # -- the process -------------------------------------------------------------------------------------

    async def run(self, started: asyncio.Event | None = None) -> None:
        """Run HAProxy once a config is installed; restart it with backoff whenever it exits; stop it
        (SIGTERM, then SIGKILL) when cancelled."""
        await self._installed.wait()
        backoff = BACKOFF_FIRST
        loop = asyncio.get_running_loop()
        while True:
            begun = loop.time()
            async with asyncio.TaskGroup() as tg:
                proc = await self._spawn()
                tg.create_task(self._log(proc), name="haproxy-log")
                try:
                    with contextlib.suppress(ProxyDown):  # died at once: its exit code says why
                        await self._wait_worker(lambda pid: pid is not None)
                        if started is not None:
                            started.set()
                    code = await proc.wait()
                finally:
                    await self._stop()
            if loop.time() - begun > 60:
                backoff = BACKOFF_FIRST
            self.restarts += 1
            log.error("ingress: haproxy exited with %s; restarting in %.1fs with %s", code, backoff,
                      self.config)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def _spawn(self) -> asyncio.subprocess.Process:
        await asyncio.to_thread(Path(self.files.admin_socket).unlink, missing_ok=True)
        self._proc = await asyncio.create_subprocess_exec(
            "setpriv", "--pdeathsig", "KILL", "--", self.binary, "-W", "-db", "-f", str(self.config),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        log.info("ingress: haproxy master started (pid %d) with %s", self._proc.pid, self.config)
        return self._proc

    @staticmethod
    async def _log(proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            text = line.decode(errors="replace").rstrip()
            if text:
                log.info("haproxy: %s", text)

    async def _stop(self) -> None:
        """SIGTERM to the master (it stops its workers), SIGKILL after STOP_GRACE; then whatever is left
        of its process group (a worker whose master was killed) is killed too."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), STOP_GRACE)
            except TimeoutError:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
