"""sha256 without importing OpenSSL's _hashlib (several ms per exec'd plugin): the builtin one."""

TYPE_CHECKING = False  # typing is not imported at run time: the exec'd path stays lean
if TYPE_CHECKING:  # typeshed has no stub for the private builtin; hashlib's sha256 is its interface
    from hashlib import sha256
else:
    try:
        from _sha256 import sha256  # CPython <= 3.11
    except ImportError:  # pragma: no cover - newer CPython
        from hashlib import sha256

__all__ = ["sha256"]
