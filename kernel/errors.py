"""The kernel layer's error types. Each is an OSError carrying the kernel's errno, so callers that
catch OSError (or test `e.errno`) keep working; the subclass says which mechanism failed."""

from __future__ import annotations


class KernelError(OSError):
    """A kernel mechanism refused or failed; `errno` is the kernel's answer when there is one."""


class SyscallError(KernelError):
    """A raw syscall (kernel.syscalls) returned an error."""
