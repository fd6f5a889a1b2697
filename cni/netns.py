"""Entering a network namespace safely: on a fresh, dedicated thread that always switches back.

setns(2) changes only the calling thread's namespace, so the work runs on a
thread of its own; if the switch back ever failed the thread ends anyway and
no other code can run in the wrong namespace. Sockets opened inside stay
bound to that namespace after the thread returns, so callers open a netlink
socket in the netns and use it from anywhere.
"""

from __future__ import annotations

import ctypes
import os
import threading

from cni.errors import UNKNOWN_CONTAINER, CNIError

TYPE_CHECKING = False  # typing is not imported at run time: the exec'd path stays lean
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    T = TypeVar("T")

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def setns(fd: int, nstype: int = CLONE_NEWNET) -> None:
    if _libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def open_netns(path: str) -> int:
    """An fd for the netns at `path` (CNI_NETNS); CNIError 3 if it is not there."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise CNIError(UNKNOWN_CONTAINER, "failed to open netns", f"{path}: {e.strerror}") from None


def run_in(netns_fd: int, fn: Callable[[], T]) -> T:
    """Call `fn` with this process's thread inside `netns_fd`; return its value or raise its error."""
    box: dict[str, object] = {}

    def body() -> None:
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            setns(netns_fd)
            try:
                box["value"] = fn()
            except BaseException as e:
                box["error"] = e
            finally:
                setns(home)  # if this raises the thread simply dies: it is never reused
        except BaseException as e:
            box.setdefault("error", e)
        finally:
            os.close(home)

    t = threading.Thread(target=body, name="netns", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]
