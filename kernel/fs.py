"""Replacing a file so that a crash leaves the old or the new content, never a mix or nothing.

The one way the tree does it: write a temporary file next to the target, fsync it, rename it over
the target, then fsync the directory so the rename itself is on disk. Without the first fsync a
crash after the rename can leave an empty file (ext4, xfs); without the second the rename can be
lost. The temporary file is removed when anything fails before the rename.

- `atomic_write(path, data)`: the common case, the whole content at once.
- `AtomicFile(path)`: streamed content, committed (or aborted) when complete, e.g. a blob that is
  published only if it hashes to its digest.
- `publish(tmp, path)`: the commit step alone, for a temporary file another program wrote (a compiler).
- `atomic_symlink(target, link)`: the same for a symbolic link.

Temporary names are `.<name>.<pid>.<random>.tmp` in the target's directory (or `tmp_dir`, which
must be on the same filesystem): hidden, unique per writer, and never a name a reader looks for.
`mode` is the new file's permission bits before the umask, as for open(2).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import TracebackType

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC


def temp_path(path: str | os.PathLike, tmp_dir: str | os.PathLike | None = None) -> str:
    """A fresh temporary name for a file that will replace `path`."""
    path = os.fspath(path)
    directory, name = os.path.split(path)
    return os.path.join(os.fspath(tmp_dir) if tmp_dir is not None else directory,
                        f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")


def fsync_dir(path: str | os.PathLike) -> None:
    """Make the directory's entries (a rename, a new name) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rename_durably(tmp: str, path: str) -> None:
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


class AtomicFile:
    """A file written under a temporary name and renamed over `path` by `commit()` (after an fsync);
    `abort()` removes it. As a context manager: committed if the block succeeds, aborted otherwise."""

    def __init__(self, path: str | os.PathLike, mode: int = 0o666,
                 tmp_dir: str | os.PathLike | None = None) -> None:
        self.path = os.fspath(path)
        self.tmp = temp_path(self.path, tmp_dir)
        self.fd = os.open(self.tmp, _CREATE, mode)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]

    def commit(self) -> None:
        try:
            os.fsync(self.fd)
            os.close(self.fd)
            self.fd = -1
            _rename_durably(self.tmp, self.path)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Drop what was written (the target is untouched); safe to call more than once."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        try:
            os.unlink(self.tmp)
        except FileNotFoundError:
            pass

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def atomic_write(path: str | os.PathLike, data: bytes | str, mode: int = 0o666) -> None:
    """Replace `path` with `data` (str is written as UTF-8), durably (see the module's docstring)."""
    f = AtomicFile(path, mode)
    try:
        f.write(data.encode() if isinstance(data, str) else data)
    except BaseException:
        f.abort()
        raise
    f.commit()


def publish(tmp: str | os.PathLike, path: str | os.PathLike) -> None:
    """Rename a finished temporary file (from `temp_path`) over `path`, durably; removed on failure."""
    tmp, path = os.fspath(tmp), os.fspath(path)
    try:
        fd = os.open(tmp, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _rename_durably(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_symlink(target: str, link: str | os.PathLike, tmp: str | os.PathLike | None = None) -> None:
    """Point `link` at `target`, replacing whatever `link` was in one rename. `tmp`: the temporary
    link's name when a layout fixes it (kubelet's `..data_tmp`); a stale one there is replaced."""
    link = os.fspath(link)
    tmp = os.fspath(tmp) if tmp is not None else temp_path(link)
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    try:
        _rename_durably(tmp, link)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def dir_usage(path: str | os.PathLike) -> tuple[int, int]:
    """(bytes, inodes) below `path`, as du counts apparent sizes (0, 0 when it does not exist)."""
    used = inodes = 0
    for root, dirs, files in os.walk(os.fspath(path)):
        for name in files + dirs:
            inodes += 1
            try:
                used += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return used, inodes
