"""BIRD 2, run and supervised for one node: its own configuration, control socket, pid file and log under the
node's BIRD directory (`Layout.bird_dir`), so several nodes (lab namespaces) on one host never share one.

- A render is checked with `bird -p -c` before it replaces the installed config; one that does not parse is
  never loaded (the running BIRD keeps its last good config) and BIRD's own message is returned.
- A changed config is loaded with `birdc -s <socket> configure`: BIRD restarts only the protocols whose
  settings changed (a node joining adds one session, the others stay up); BIRD is never restarted for it.
- `run()` owns the process: an existing BIRD of this directory (the agent was killed and came back) is
  adopted when its control socket answers, replaced otherwise; BIRD exiting is restarted with backoff, and
  its kernel protocol then removes the routes the dead one left in the kernel (no `persist`). On stop BIRD
  gets SIGTERM and withdraws its routes. BIRD logs to a file that is forwarded into this process's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
from pathlib import Path

from kernel.fs import atomic_write
from kernel.procs import alive as _alive

log = logging.getLogger("nodeagent.nodenet.bird")

BIRD = "bird"
BIRDC = "birdc"
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 30.0
STABLE_AFTER = 60.0  # a BIRD that ran this long resets the backoff
START_WAIT = 10.0  # seconds for a started BIRD's control socket to answer
STOP_GRACE = 5.0
LOG_POLL = 0.5
LOG_MAX = 4 << 20  # the forwarded log file is truncated past this (BIRD appends: O_APPEND)


class InvalidConfig(Exception):
    """`bird -p` refused a render: BIRD's message (file:line:column and the reason)."""


class BirdDown(Exception):
    """BIRD is not running (not started yet, or it died and is being restarted)."""


@dataclasses.dataclass(frozen=True)
class Protocol:
    """One line of `birdc show protocols`."""

    name: str
    proto: str  # BGP, Kernel, Static, Device, Direct
    table: str
    state: str  # up, down, start
    since: str
    info: str  # BGP: its session state (Established, Active, Connect, Idle...) and the last error

    @property
    def bgp_state(self) -> str:
        return self.info.split(None, 1)[0] if self.info else ""

    @property
    def last_error(self) -> str:
        parts = self.info.split(None, 1)
        return parts[1].strip() if len(parts) > 1 else ""


def parse_protocols(text: str) -> list[Protocol]:
    """`birdc show protocols` → its rows (the banner and the header skipped)."""
    out = []
    for line in text.splitlines():
        if not line.strip() or line.startswith(("BIRD ", "Name ")):
            continue
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        out.append(Protocol(parts[0], parts[1], parts[2], parts[3], parts[4],
                            parts[5].strip() if len(parts) > 5 else ""))
    return out


@dataclasses.dataclass(frozen=True)
class Files:
    directory: str

    @property
    def config(self) -> str:
        return str(Path(self.directory, "bird.conf"))

    @property
    def socket(self) -> str:
        return str(Path(self.directory, "bird.ctl"))

    @property
    def pid_file(self) -> str:
        return str(Path(self.directory, "bird.pid"))

    @property
    def log_file(self) -> str:
        return str(Path(self.directory, "bird.log"))


async def _run(*argv: str, limit: float = 10.0) -> tuple[int, str]:
    p = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                             stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        async with asyncio.timeout(limit):
            out, _ = await p.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            p.kill()
        await p.wait()
        return -1, f"{argv[0]} did not answer within {limit:.0f}s"
    return p.returncode if p.returncode is not None else -1, out.decode(errors="replace")


async def check_config(text: str, directory: str | Path) -> None:
    """`bird -p -c` on a candidate file beside the installed one; InvalidConfig with BIRD's message."""
    candidate = Path(directory, "bird.conf.new")
    await asyncio.to_thread(atomic_write, candidate, text)
    try:
        code, out = await _run(BIRD, "-p", "-c", str(candidate))
    except FileNotFoundError:
        raise BirdDown("BIRD 2 is not installed (Debian's bird2; make install adds it)") from None
    finally:
        await asyncio.to_thread(candidate.unlink, missing_ok=True)
    if code != 0:
        said = out.strip().replace(str(candidate), "bird.conf")
        raise InvalidConfig(said or f"bird -p exited {code}")


class Bird:
    """One node's supervised BIRD. `run()` owns the process (start it in the owner's TaskGroup); `apply()`
    installs a render."""

    def __init__(self, directory: str | Path) -> None:
        self.files = Files(str(directory))
        if len(self.files.socket.encode()) > 107:
            raise ValueError(f"bgp: {self.files.socket} is too long for a unix socket "
                             "(use a shorter data dir)")
        self.current: str | None = None  # the config the running BIRD has loaded
        self.restarts = 0
        self.reconfigures = 0
        self.pid: int | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._installed = asyncio.Event()
        self._lock = asyncio.Lock()
        self._log_offset = 0

    # -- the configuration ----------------------------------------------------------------------------

    async def apply(self, text: str) -> str:
        """Make BIRD run `text`: 'unchanged', 'installed' (not running yet: run() starts it with it) or
        'reconfigured'. InvalidConfig leaves the installed file and the running BIRD as they were."""
        async with self._lock:
            if text == self.current:
                return "unchanged"
            await asyncio.to_thread(os.makedirs, self.files.directory, exist_ok=True)
            await check_config(text, self.files.directory)
            await asyncio.to_thread(atomic_write, self.files.config, text)
            if self.pid is None:
                self.current = text
                self._installed.set()
                return "installed"
            await self.configure()
            self.current = text
            self.reconfigures += 1
            return "reconfigured"

    async def configure(self) -> None:
        """`birdc configure`: BIRD reads the installed file and restarts only the protocols it changes."""
        code, out = await _run(BIRDC, "-s", self.files.socket, "configure")
        if code != 0 or not any(w in out for w in ("Reconfigured", "Reconfiguration in progress")):
            raise BirdDown(f"birdc configure: {out.strip() or f'exit {code}'}")

    async def command(self, *words: str) -> str:
        """A birdc command on this BIRD's socket (its output; BirdDown when it does not answer)."""
        code, out = await _run(BIRDC, "-s", self.files.socket, *words)
        if code != 0 or "Unable to connect" in out:
            raise BirdDown(out.strip() or f"birdc exited {code}")
        return out

    async def protocols(self) -> list[Protocol]:
        return parse_protocols(await self.command("show", "protocols"))

    async def answers(self) -> bool:
        try:
            await self.command("show", "status")
        except BirdDown:
            return False
        return True

    # -- the process ----------------------------------------------------------------------------------

    async def run(self, started: asyncio.Event | None = None) -> None:
        """Adopt this directory's BIRD or start one once a config is installed; restart it with backoff
        whenever it exits; stop it (SIGTERM: it withdraws its routes) when cancelled."""
        loop = asyncio.get_running_loop()
        try:
            self._log_offset = await asyncio.to_thread(_size, self.files.log_file)
            await self._adopt()
            if self.pid is None:
                await self._installed.wait()
            backoff = BACKOFF_FIRST
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._forward_log(), name="bird-log")
                while True:
                    begun = loop.time()
                    if self.pid is None:
                        try:
                            await self._spawn()
                        except OSError as e:  # no bird binary, a data dir it cannot use: said, retried
                            how = f"could not start: {e}"
                    if self.pid is not None:
                        if started is not None:
                            started.set()
                        how = await self._wait_exit()
                    self.pid, self._proc = None, None
                    if loop.time() - begun > STABLE_AFTER:
                        backoff = BACKOFF_FIRST
                    self.restarts += 1
                    log.error("bgp: BIRD exited (%s); restarting in %.0fs with %s", how, backoff,
                              self.files.config)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_MAX)
        finally:
            await asyncio.shield(self.stop())

    async def _adopt(self) -> None:
        """A BIRD of this directory left by an earlier agent: adopted when its socket answers, else
        stopped; stale socket and pid files go."""
        pid = await asyncio.to_thread(_read_pid, self.files.pid_file)
        if pid is not None and await asyncio.to_thread(_is_our_bird, pid, self.files.socket):
            self.pid = pid
            if await self.answers():
                log.info("bgp: adopted the running BIRD (pid %d) of %s", pid, self.files.directory)
                return
            log.warning("bgp: BIRD pid %d of %s does not answer on %s; replacing it", pid,
                        self.files.directory, self.files.socket)
            await self.stop()
        self.pid = None
        for f in (self.files.socket, self.files.pid_file):
            await asyncio.to_thread(Path(f).unlink, missing_ok=True)

    async def stop_left_over(self) -> bool:
        """Stop a BIRD of this directory that no agent supervises (`nodeagent reset`); True if one ran."""
        pid = await asyncio.to_thread(_read_pid, self.files.pid_file)
        if pid is None or not await asyncio.to_thread(_is_our_bird, pid, self.files.socket):
            return False
        self.pid = pid
        await self.stop()
        return True

    async def _spawn(self) -> None:
        await asyncio.to_thread(Path(self.files.socket).unlink, missing_ok=True)
        fd = await asyncio.to_thread(os.open, self.files.log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                                     0o644)
        try:
            # its own session: a Ctrl-C in the agent's terminal is the agent's to handle; BIRD outlives a
            # killed agent and is adopted by the next one
            self._proc = await asyncio.create_subprocess_exec(
                BIRD, "-f", "-c", self.files.config, "-s", self.files.socket, "-P", self.files.pid_file,
                stdin=asyncio.subprocess.DEVNULL, stdout=fd, stderr=fd, start_new_session=True)
        finally:
            os.close(fd)
        self.pid = self._proc.pid
        log.info("bgp: BIRD started (pid %d) with %s, control socket %s", self.pid, self.files.config,
                 self.files.socket)
        loop = asyncio.get_running_loop()
        end = loop.time() + START_WAIT
        while loop.time() < end and self._proc.returncode is None:
            if await self.answers():
                return
            await asyncio.sleep(0.1)

    async def _wait_exit(self) -> str:
        """Until BIRD exits: how it ended."""
        if self._proc is not None:
            code = await self._proc.wait()
            return f"signal {-code}" if code < 0 else f"exit code {code}"
        assert self.pid is not None
        # adopted: not our child, so no wait(); a pidfd becomes readable when the process exits
        try:
            fd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            return "gone"
        gone = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_reader(fd, gone.set)
        try:
            await gone.wait()
        finally:
            loop.remove_reader(fd)
            os.close(fd)
        return "gone"

    async def stop(self) -> None:
        """SIGTERM (BIRD withdraws its kernel routes and closes its sessions), SIGKILL after STOP_GRACE."""
        pid, proc = self.pid, self._proc
        self.pid, self._proc = None, None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            loop = asyncio.get_running_loop()
            end = loop.time() + STOP_GRACE
            while await asyncio.to_thread(_alive, pid) and loop.time() < end:
                if proc is not None and proc.returncode is not None:
                    break
                await asyncio.sleep(0.05)
            with contextlib.suppress(ProcessLookupError):
                if await asyncio.to_thread(_alive, pid):
                    log.warning("bgp: BIRD pid %d did not stop within %.0fs; killing it", pid, STOP_GRACE)
                    os.kill(pid, signal.SIGKILL)
            if proc is not None:
                await proc.wait()
            log.info("bgp: BIRD (pid %d) stopped", pid)
        await asyncio.to_thread(self._forward_once)
        for f in (self.files.socket, self.files.pid_file):
            await asyncio.to_thread(Path(f).unlink, missing_ok=True)
        self.current = None

    # -- its log --------------------------------------------------------------------------------------

    async def _forward_log(self) -> None:
        while True:
            await asyncio.to_thread(self._forward_once)
            await asyncio.sleep(LOG_POLL)

    def _forward_once(self) -> None:
        try:
            with open(self.files.log_file, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self._log_offset:
                    self._log_offset = 0
                f.seek(self._log_offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        for line in data[:end].decode(errors="replace").splitlines():
            if line.strip():
                log.info("bird: %s", _strip_time(line))
        self._log_offset += end
        if self._log_offset > LOG_MAX:
            os.truncate(self.files.log_file, 0)
            self._log_offset = 0


def _strip_time(line: str) -> str:
    """'2026-11-27 07:49:40.633 <INFO> Started' → '<INFO> Started' (our log has its own time)."""
    parts = line.split(" ", 2)
    return parts[2] if len(parts) == 3 and parts[0][:2].isdigit() and ":" in parts[1] else line


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _read_pid(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _is_our_bird(pid: int, socket: str) -> bool:
    """pid is a live BIRD serving `socket` (not a recycled pid of something else)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(argv) and os.path.basename(argv[0].decode(errors="replace")) == BIRD \
        and socket.encode() in argv and _alive(pid)
