"""CNI spec versions: what we speak, and converting results between result formats."""

from __future__ import annotations

import copy

TYPE_CHECKING = False  # typing is not imported at run time: the exec'd path stays lean
if TYPE_CHECKING:
    from typing import Any

SUPPORTED = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
LATEST = "1.1.0"


def parse(v: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in v.split("."))
    except ValueError:
        return (0,)


def at_least(v: str, floor: str) -> bool:
    return parse(v) >= parse(floor)


def convert_result(result: dict[str, Any], to_version: str) -> dict[str, Any]:
    """Re-shape a result for `to_version`: 0.3.x/0.4.0 carry ips[].version, 1.x does not."""
    out = copy.deepcopy(result)
    out["cniVersion"] = to_version
    legacy = not at_least(to_version, "1.0.0")
    for ip in out.get("ips", []):
        if legacy:
            ip["version"] = "6" if ":" in ip.get("address", "") else "4"
        else:
            ip.pop("version", None)
    return out
