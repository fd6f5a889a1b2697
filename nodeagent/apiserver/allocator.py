"""ClusterIP and NodePort allocation, rebuilt from the stored Services at start and checked on every
create."""

from __future__ import annotations

import ipaddress
import random
from collections.abc import Iterable
from typing import Any

from nodeagent.api.validation import err

NODE_PORT_RANGE = (30000, 32767)


class Allocators:
    """In-memory bitmaps of what stored Services hold; the store stays the truth (rebuilt by `rebuild`)."""

    def __init__(self, cidr: str = "10.96.0.0/12", node_ports: tuple[int, int] = NODE_PORT_RANGE) -> None:
        self.net = ipaddress.ip_network(cidr)
        self.node_ports = node_ports
        self.ips: dict[str, str] = {}  # ip -> "ns/name"
        self.ports: dict[tuple[int, str], str] = {}  # (nodePort, protocol) -> "ns/name"

    @property
    def first_ip(self) -> str:
        return str(self.net.network_address + 1)

    def rebuild(self, services: Iterable[dict[str, Any]]) -> None:
        self.ips.clear()
        self.ports.clear()
        for s in services:
            self._hold(s)

    def _hold(self, svc: dict[str, Any]) -> None:
        owner = f"{svc['metadata'].get('namespace')}/{svc['metadata']['name']}"
        spec = svc.get("spec") or {}
        for ip in spec.get("clusterIPs") or [spec.get("clusterIP")]:
            if ip and ip != "None":
                self.ips[ip] = owner
        for p in spec.get("ports") or []:
            if p.get("nodePort"):
                self.ports[(p["nodePort"], p.get("protocol", "TCP"))] = owner
        if spec.get("healthCheckNodePort"):
            self.ports[(spec["healthCheckNodePort"], "TCP")] = owner

    def release(self, svc: dict[str, Any]) -> None:
        owner = f"{svc['metadata'].get('namespace')}/{svc['metadata']['name']}"
        for ip in [k for k, v in self.ips.items() if v == owner]:
            del self.ips[ip]
        for port in [k for k, v in self.ports.items() if v == owner]:
            del self.ports[port]

    def allocate(self, svc: dict[str, Any], old: dict[str, Any] | None = None) -> list[dict[str, str]]:
        """Fill in clusterIP(s) and nodePorts; returns field errors (nothing held) on a conflict or bad
        value."""
        spec = svc.setdefault("spec", {})
        owner = f"{svc['metadata'].get('namespace')}/{svc['metadata']['name']}"
        errs: list[dict[str, str]] = []
        typ = spec.get("type", "ClusterIP")
        oldspec = (old or {}).get("spec") or {}
        if typ == "ExternalName":
            spec.pop("clusterIP", None)
            spec.pop("clusterIPs", None)
        else:
            ip = spec.get("clusterIP") or oldspec.get("clusterIP")
            if ip and ip != "None":
                try:
                    addr = ipaddress.ip_address(ip)
                except ValueError:
                    return [err("FieldValueInvalid", "spec.clusterIPs[0]",
                                f'Invalid value: "{ip}": must be a valid IP address')]
                if addr not in self.net:
                    return [err("FieldValueInvalid", "spec.clusterIPs[0]",
                                f'Invalid value: "{ip}": failed to allocate IP {ip}: the provided IP '
                                f'({ip}) is not in '
                                f"the valid range. The range of valid IPs is {self.net}")]
                if self.ips.get(ip, owner) != owner:
                    return [err("FieldValueInvalid", "spec.clusterIPs[0]",
                                f'Invalid value: "{ip}": failed to allocate IP {ip}: provided IP is '
                                'already allocated')]
            elif not ip:
                ip = self._free_ip()
                if ip is None:
                    return [err("FieldValueInvalid", "spec.clusterIPs", "range is full")]
            spec["clusterIP"] = ip
            spec["clusterIPs"] = [ip]
        wants_np = typ in ("NodePort", "LoadBalancer")
        # allocateLoadBalancerNodePorts: false: no nodePort is allocated, the ones given are kept
        new_np = typ == "NodePort" or (typ == "LoadBalancer"
                                       and spec.get("allocateLoadBalancerNodePorts", True))
        old_ports = {(p.get("port"), p.get("protocol", "TCP")): p.get("nodePort")
                     for p in oldspec.get("ports") or []}
        used_here: set[tuple[int, str]] = set()
        for i, p in enumerate(spec.get("ports") or []):
            proto = p.get("protocol", "TCP")
            if not wants_np:
                p.pop("nodePort", None)
                continue
            np = p.get("nodePort") or old_ports.get((p.get("port"), proto))
            if not np and not new_np:
                p.pop("nodePort", None)
                continue
            if np:
                lo, hi = self.node_ports
                if not lo <= np <= hi:
                    errs.append(err("FieldValueInvalid", f"spec.ports[{i}].nodePort",
                                    f"Invalid value: {np}: provided port is not in the valid range. The "
                                    f"range of valid ports is {lo}-{hi}"))
                elif self.ports.get((np, proto), owner) != owner or (np, proto) in used_here:
                    errs.append(err("FieldValueInvalid", f"spec.ports[{i}].nodePort",
                                    f"Invalid value: {np}: provided port is already allocated"))
            else:
                np = self._free_port(proto, used_here)
            p["nodePort"] = np
            used_here.add((np, proto))
        errs += self._health_check_port(spec, oldspec, owner, used_here)
        if errs:
            return errs
        self.release(svc)
        self._hold(svc)
        return []

    def _health_check_port(self, spec: dict[str, Any], oldspec: dict[str, Any], owner: str,
                           used_here: set[tuple[int, str]]) -> list[dict[str, str]]:
        """spec.healthCheckNodePort: a node port for a LoadBalancer Service with Local external traffic
        policy (kube-proxy answers it with the node's local endpoint count), kept across updates."""
        if not (spec.get("type") == "LoadBalancer" and spec.get("externalTrafficPolicy") == "Local"):
            spec.pop("healthCheckNodePort", None)
            return []
        hc = spec.get("healthCheckNodePort") or oldspec.get("healthCheckNodePort")
        if hc:
            lo, hi = self.node_ports
            if not lo <= hc <= hi:
                return [err("FieldValueInvalid", "spec.healthCheckNodePort",
                            f"Invalid value: {hc}: provided port is not in the valid range. The range of "
                            f"valid ports is {lo}-{hi}")]
            if self.ports.get((hc, "TCP"), owner) != owner or (hc, "TCP") in used_here:
                return [err("FieldValueInvalid", "spec.healthCheckNodePort",
                            f"Invalid value: {hc}: provided port is already allocated")]
        else:
            hc = self._free_port("TCP", used_here)
        spec["healthCheckNodePort"] = hc
        return []

    def _free_ip(self) -> str | None:
        size = self.net.num_addresses
        base = int(self.net.network_address)
        for _ in range(64):
            cand = str(ipaddress.ip_address(base + random.randrange(2, size - 1)))
            if cand not in self.ips:
                return cand
        for off in range(2, size - 1):
            cand = str(ipaddress.ip_address(base + off))
            if cand not in self.ips:
                return cand
        return None

    def _free_port(self, proto: str, taken: set[tuple[int, str]]) -> int:
        lo, hi = self.node_ports
        for _ in range(64):
            np = random.randint(lo, hi)
            if (np, proto) not in self.ports and (np, proto) not in taken:
                return np
        for np in range(lo, hi + 1):
            if (np, proto) not in self.ports and (np, proto) not in taken:
                return np
        raise RuntimeError("node port range is full")
