"""Enforcing node allocatable on cgroups (kubelet cm/node_container_manager_linux.go).

`kubepods` gets the allocatable amounts (capacity minus --system-reserved and --kube-reserved; the hard
eviction threshold is not taken off, so the eviction manager acts before the cgroup's OOM killer) when
`pods` is enforced, else the node's capacity; `system-reserved` / `kube-reserved` limit the named existing
cgroups to their reservations. A reserved cgroup that does not exist stops the kubelet, as kubelet's
enforceExistingCgroup does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kernel.cgroups.base import Resources
from nodeagent.kubelet import resources

log = logging.getLogger("nodeagent.kubelet")


class EnforcementError(RuntimeError):
    """A reserved cgroup that cannot be limited (the kubelet does not start)."""


def _resources(cfg: resources.ResourceConfig) -> Resources:
    return Resources(cpu_shares=cfg.cpu_shares or 0, memory_limit=cfg.memory_limit or 0)


def reserved_config(reserved: Mapping[str, Any]) -> resources.ResourceConfig:
    """getCgroupConfig for a reservation: cpu.shares from its cpu, the memory limit from its memory."""
    rl = resources._to_list(reserved)
    mem = resources._whole(rl["memory"]) if "memory" in rl else None
    shares = resources.milli_cpu_to_shares(resources._milli(rl["cpu"])) if "cpu" in rl else None
    return resources.ResourceConfig(cpu_shares=shares, memory_limit=mem)


def enforce(driver: Any, cgroup_root: Sequence[str], capacity: Mapping[str, Any], enforced: Sequence[str],
            system_reserved: Mapping[str, Any], kube_reserved: Mapping[str, Any],
            system_cgroup: str = "", kube_cgroup: str = "") -> dict[str, resources.ResourceConfig]:
    """Write the limits (blocking cgroup writes: call from a thread); returns what each cgroup got."""
    kubepods = resources.node_allocatable_cgroup(cgroup_root).cgroupfs()
    if "pods" in enforced:
        pods = resources.kubepods_resource_config(capacity, system_reserved, kube_reserved)
    else:
        pods = resources.kubepods_resource_config(capacity)
    done = {kubepods: pods}
    try:
        driver.apply(kubepods, _resources(pods))
    except OSError as e:  # e.g. a memory limit below what the pods use now: kubelet logs and carries on
        log.warning("node allocatable: limits on %s not applied: %s", kubepods, e)
    for what, name, cgroup, reserved in (
            ("system-reserved", "System Reserved", system_cgroup, system_reserved),
            ("kube-reserved", "Kube Reserved", kube_cgroup, kube_reserved)):
        if what not in enforced:
            continue
        if not driver.exists(cgroup):
            raise EnforcementError(f'Failed to enforce {name} Cgroup Limits on "{cgroup}": "{cgroup}" cgroup '
                                   "does not exist")
        cfg = reserved_config(reserved)
        try:
            driver.apply(cgroup, _resources(cfg))
        except OSError as e:
            raise EnforcementError(f'Failed to enforce {name} Cgroup Limits on "{cgroup}": {e}') from None
        done[cgroup] = cfg
    log.info("node allocatable enforced (%s): %s", ",".join(enforced) or "nothing",
             ", ".join(f"{k} cpu.shares={v.cpu_shares} memory={v.memory_limit}" for k, v in done.items()))
    return done
