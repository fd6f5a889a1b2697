"""The CNI spec's error codes and the one exception type plugins raise.

Everything a plugin raises that is not a `CNIError` becomes code 999 at the
protocol boundary (`cni.skel`), so callers always get the spec's error JSON.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: the exec'd path stays lean
if TYPE_CHECKING:
    from typing import Any

INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENV = 4
IO_FAILURE = 5
DECODE_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN = 11
NOT_AVAILABLE = 50
NOT_AVAILABLE_DEGRADED = 51
INTERNAL = 999


class CNIError(Exception):
    """A spec error: `code`, `msg`, `details`, printed as JSON on stdout by the skel."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(f"{msg}: {details}" if details else msg)
        self.code = code
        self.msg = msg
        self.details = details

    def to_json(self, cni_version: str) -> dict[str, Any]:
        out: dict[str, Any] = {"cniVersion": cni_version, "code": self.code, "msg": self.msg}
        if self.details:
            out["details"] = self.details
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CNIError:
        return cls(int(data.get("code", INTERNAL)), str(data.get("msg", "")), str(data.get("details", "")))
