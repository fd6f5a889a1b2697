"""sha256 without importing OpenSSL's _hashlib (several ms per exec'd plugin): the builtin one."""

try:
    from _sha256 import sha256  # CPython <= 3.11
except ImportError:  # pragma: no cover - newer CPython
    from hashlib import sha256

__all__ = ["sha256"]
