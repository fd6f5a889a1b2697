"""Allocation stores: the protocol, the on-disk store, and an in-memory fake for unit tests.

Disk layout is the reference host-local's (`<dataDir>/<network>/<ip>` holding
"<containerID>\\r\\n<ifname>", `last_reserved_ip.<set>`), so the two can share a dataDir.
Every reservation is written to a temp file and hard-linked to its address name:
the link is exclusive and atomic, so a SIGKILL can never leave a half-written owner,
and an address can never be handed out twice. One flock on the directory serialises
processes (and threads of the daemon: each holds its own open file description).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import threading

from cni.errors import IO_FAILURE, CNIError

TYPE_CHECKING = False  # typing is not imported at run time: the exec'd path stays lean
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Protocol

LAST_PREFIX = "last_reserved_ip."
TMP_PREFIX = ".tmp-"
LOCK_NAME = "lock"


if TYPE_CHECKING:

    class Store(Protocol):
        def lock(self) -> contextlib.AbstractContextManager[None]: ...
        def reserve(self, ip: str, owner: tuple[str, str], range_set: int) -> bool: ...
        def last_reserved(self, range_set: int) -> str | None: ...
        def release(self, ip: str) -> None: ...
        def owners(self) -> dict[str, tuple[str, str]]: ...
        def cleanup_partial(self) -> int: ...


def owned_by(store: Store, owner: tuple[str, str]) -> list[str]:
    return [ip for ip, o in store.owners().items() if o == owner]


class DiskStore:
    def __init__(self, data_dir: str, network: str) -> None:
        self.dir = os.path.join(data_dir, network)
        try:
            os.makedirs(self.dir, mode=0o755, exist_ok=True)
        except OSError as e:
            raise CNIError(IO_FAILURE, "cannot create IPAM data dir", f"{self.dir}: {e}") from None

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the description drops the flock

    def reserve(self, ip: str, owner: tuple[str, str], range_set: int) -> bool:
        path = os.path.join(self.dir, ip)
        if os.path.lexists(path):
            return False
        tmp = os.path.join(self.dir, f"{TMP_PREFIX}{ip}.{os.getpid()}.{threading.get_ident()}")
        with open(tmp, "w", newline="") as f:
            f.write(f"{owner[0]}\r\n{owner[1]}")
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        self._write_last(range_set, ip)
        return True

    def _write_last(self, range_set: int, ip: str) -> None:
        # Only a round-robin hint, written in place on purpose: a rename here costs an ext4 data
        # flush (~1.5 ms) per ADD, and a torn hint is harmless (an unparsable one restarts the scan).
        # Truncating to zero would trigger the same flush (ext4 auto_da_alloc): overwrite, then shorten.
        fd = os.open(os.path.join(self.dir, f"{LAST_PREFIX}{range_set}"),
                     os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            data = ip.encode()
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))
        finally:
            os.close(fd)

    def last_reserved(self, range_set: int) -> str | None:
        try:
            with open(os.path.join(self.dir, f"{LAST_PREFIX}{range_set}")) as f:
                return f.read().strip() or None
        except FileNotFoundError:
            return None

    def release(self, ip: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.dir, ip))

    def owners(self) -> dict[str, tuple[str, str]]:
        out: dict[str, tuple[str, str]] = {}
        for name in os.listdir(self.dir):
            if name == LOCK_NAME or name.startswith((LAST_PREFIX, TMP_PREFIX)) or TMP_PREFIX in name:
                continue
            try:
                with open(os.path.join(self.dir, name), newline="") as f:
                    data = f.read()
            except (FileNotFoundError, IsADirectoryError):
                continue
            cid, _, ifname = data.partition("\r\n")
            out[name] = (cid.strip(), ifname.strip())
        return out

    def cleanup_partial(self) -> int:
        """Remove temp files a killed writer left (call under the lock)."""
        n = 0
        for name in os.listdir(self.dir):
            if TMP_PREFIX in name:
                try:
                    os.unlink(os.path.join(self.dir, name))
                    n += 1
                except OSError as e:
                    if e.errno != errno.ENOENT:
                        raise
        return n


class MemoryStore:
    """The fake: same semantics, a dict and a threading lock."""

    def __init__(self) -> None:
        self.ips: dict[str, tuple[str, str]] = {}
        self.last: dict[int, str] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        with self._lock:
            yield

    def reserve(self, ip: str, owner: tuple[str, str], range_set: int) -> bool:
        if ip in self.ips:
            return False
        self.ips[ip] = owner
        self.last[range_set] = ip
        return True

    def last_reserved(self, range_set: int) -> str | None:
        return self.last.get(range_set)

    def release(self, ip: str) -> None:
        self.ips.pop(ip, None)

    def owners(self) -> dict[str, tuple[str, str]]:
        return dict(self.ips)

    def cleanup_partial(self) -> int:
        return 0
