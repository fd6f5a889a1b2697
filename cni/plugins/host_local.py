"""nodeagent-host-local: an IPAM plugin compatible with the reference host-local.

Pure stdlib, so its exec'd path costs only Python start-up, and our bridge calls
it in-process. One address per range set per (containerID, ifname); ADD for an
attachment that already holds addresses returns them (a retried ADD is not a leak).
"""

from __future__ import annotations

import ipaddress
import os

from cni.errors import INTERNAL, IO_FAILURE, NOT_AVAILABLE, CNIError
from cni.ipam import allocator
from cni.ipam import config as ipam_config
from cni.ipam.store import DiskStore

TYPE_CHECKING = False  # typing is not imported at run time: the exec'd path stays lean
if TYPE_CHECKING:
    from typing import Any

    from cni.ipam.store import Store
    from cni.skel import CmdArgs


def allocate(store: Store, cfg: ipam_config.IPAMConfig, owner: tuple[str, str]) -> list[tuple[Any, Any]]:
    """Reserve one address in every range set (all or nothing); [(ip, range)]."""
    got: list[tuple[Any, Any]] = []
    with store.lock():
        store.cleanup_partial()
        mine = {ipaddress.ip_address(ip) for ip, o in store.owners().items() if o == owner}
        try:
            for idx, ranges in enumerate(cfg.range_sets):
                held = next((ip for ip in mine if allocator.range_of(ranges, ip)), None)
                if held is not None:
                    got.append((held, allocator.range_of(ranges, held)))
                    continue
                last = _parse_ip(store.last_reserved(idx))
                for ip in allocator.candidates(ranges, last):
                    if store.reserve(str(ip), owner, idx):
                        got.append((ip, allocator.range_of(ranges, ip)))
                        break
                else:
                    raise CNIError(INTERNAL, f"no IP addresses available in range set {idx}",
                                   ", ".join(str(r.subnet) for r in ranges))
        except BaseException:
            for ip, _ in got:
                if ip not in mine:
                    store.release(str(ip))
            raise
    return got


def _parse_ip(s: str | None) -> Any:
    try:
        return ipaddress.ip_address(s) if s else None
    except ValueError:
        return None


def release(store: Store, owner: tuple[str, str]) -> None:
    with store.lock():
        for ip, o in store.owners().items():
            if o == owner:
                store.release(ip)


def gc(store: Store, valid: set[tuple[str, str]]) -> list[str]:
    """Free every allocation whose owner is not a valid attachment; return the freed addresses."""
    freed = []
    with store.lock():
        store.cleanup_partial()
        for ip, o in store.owners().items():
            if o not in valid:
                store.release(ip)
                freed.append(ip)
    return freed


def valid_attachments(config: dict[str, Any]) -> set[tuple[str, str]]:
    out = set()
    for a in config.get("cni.dev/valid-attachments") or []:
        if isinstance(a, dict):
            out.add((str(a.get("containerID", "")), str(a.get("ifname", ""))))
    return out


class HostLocal:
    def __init__(self, store_factory: Any = None) -> None:
        self._store_factory = store_factory or (lambda cfg: DiskStore(cfg.data_dir, cfg.name))

    def _cfg(self, a: CmdArgs) -> tuple[ipam_config.IPAMConfig, Store]:
        cfg = ipam_config.parse(a.config)
        return cfg, self._store_factory(cfg)

    def add(self, a: CmdArgs) -> dict[str, Any]:
        cfg, store = self._cfg(a)
        got = allocate(store, cfg, (a.container_id, a.ifname))
        ips = []
        for ip, r in got:
            entry: dict[str, Any] = {"address": f"{ip}/{r.subnet.prefixlen}"}
            if r.gateway is not None:
                entry["gateway"] = str(r.gateway)
            ips.append(entry)
        result: dict[str, Any] = {"cniVersion": a.version, "ips": ips,
                                  "routes": [dict(r) for r in cfg.routes]}
        if cfg.dns:
            result["dns"] = cfg.dns
        return result

    def delete(self, a: CmdArgs) -> None:
        cfg, store = self._cfg(a)
        release(store, (a.container_id, a.ifname))

    def check(self, a: CmdArgs) -> None:
        cfg, store = self._cfg(a)
        mine = {ip for ip, o in store.owners().items() if o == (a.container_id, a.ifname)}
        if not mine:
            raise CNIError(INTERNAL, "host-local: failed to find address added by container", a.container_id)
        for ip in (a.config.get("prevResult") or {}).get("ips", []):
            addr = str(ipaddress.ip_interface(ip["address"]).ip)
            in_ours = any(allocator.range_of(rs, ipaddress.ip_address(addr)) for rs in cfg.range_sets)
            if in_ours and addr not in mine:
                raise CNIError(INTERNAL, "host-local: address not allocated to this container", addr)

    def gc(self, a: CmdArgs) -> None:
        cfg, store = self._cfg(a)
        gc(store, valid_attachments(a.config))

    def status(self, a: CmdArgs) -> None:
        cfg = ipam_config.parse(a.config)
        try:
            os.makedirs(cfg.data_dir, exist_ok=True)
            if not os.access(cfg.data_dir, os.W_OK):
                raise OSError("not writable")
        except OSError as e:
            raise CNIError(NOT_AVAILABLE, "IPAM data dir unavailable", f"{cfg.data_dir}: {e}") from None


def main() -> int:
    from cni import skel

    try:
        return skel.main(HostLocal())
    except OSError as e:  # stdout/stdin trouble
        import sys

        sys.stderr.write(str(CNIError(IO_FAILURE, "I/O failure", str(e))) + "\n")
        return 1
