"""A throwaway cluster of network namespaces for NetworkPolicy tests and the benchmark.

One or more "nodes" (netproxy's Lab: a node netns with a bridge and pod netnses behind it), connected by
a routed veth link between node netnses, so pods on different nodes talk through both nodes' forward
hooks. Each node runs its own Enforcer inside its node netns (nothing is written to the host's
namespace); every enforcer sees every pod, namespace and policy, as informers would deliver them.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from kernel.netns import NetnsWorker
from netpol.enforcer import Enforcer, make_backend
from nodeagent.testing.netproxy_lab import Lab

BLOCKED = "error:113"  # EHOSTUNREACH: our REJECT with icmp admin-prohibited


def pod_object(name: str, namespace: str, ip: str, node: str, labels: dict[str, str],
               named_ports: dict[str, int] | None = None) -> dict[str, Any]:
    ports = [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in (named_ports or {}).items()]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "x", "ports": ports}]},
            "status": {"phase": "Running", "podIP": ip}}


def policy(name: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


class PolicyLab:
    def __init__(self, mode: str, nodes: int = 1, **backend_kw: Any) -> None:
        self.mode = mode
        self.loop = asyncio.new_event_loop()
        self.labs: dict[str, Lab] = {}
        self.enforcers: dict[str, Enforcer] = {}
        self.workers: list[NetnsWorker] = []
        self.pods: dict[str, dict[str, Any]] = {}  # "ns/name" -> pod object
        self.pod_node: dict[str, str] = {}
        self._link = itertools.count(1)
        try:
            for i in range(nodes):
                name = f"node{i + 1}"
                lab = Lab()
                self.labs[name] = lab
                lab.in_node("sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1")
                w = NetnsWorker(lab.node)
                self.workers.append(w)
                self.enforcers[name] = Enforcer(make_backend(mode, **backend_kw), w, node_name=name)
            names = list(self.labs)
            for a, b in itertools.combinations(names, 2):
                self._connect(self.labs[a], self.labs[b])
        except BaseException:
            self.close()
            raise

    def _connect(self, a: Lab, b: Lab) -> None:
        k = next(self._link)
        ia, ib = f"172.30.{k}.1", f"172.30.{k}.2"
        Lab.ip_batch(a.node, [f"link add x{k} type veth peer name y{k} netns {b.node}",
                              f"addr add {ia}/30 dev x{k}", f"link set x{k} up",
                              f"route add {b.cluster_cidr} via {ib}"])
        Lab.ip_batch(b.node, [f"addr add {ib}/30 dev y{k}", f"link set y{k} up",
                              f"route add {a.cluster_cidr} via {ia}"])

    # ------------------------------------------------------------------ objects
    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def namespace(self, name: str, labels: dict[str, str] | None = None) -> None:
        full = {"kubernetes.io/metadata.name": name, **(labels or {})}
        for e in self.enforcers.values():
            e.on_namespace(name, full)

    def add_pod(self, node: str, name: str, namespace: str = "default", labels: dict[str, str] | None = None,
                tcp: tuple[int, ...] = (8080,), named_ports: dict[str, int] | None = None) -> str:
        lab = self.labs[node]
        ip = lab.add_pod(f"{namespace}-{name}", tcp=tcp)
        key = f"{namespace}/{name}"
        self.pods[key] = pod_object(name, namespace, ip, node, labels or {}, named_ports)
        self.pod_node[key] = node
        for e in self.enforcers.values():
            e.on_pod(key, self.pods[key])
        return ip

    def relabel(self, key: str, labels: dict[str, str]) -> None:
        obj = self.pods[key]
        obj["metadata"]["labels"] = dict(labels)
        for e in self.enforcers.values():
            e.on_pod(key, obj)

    def apply(self, obj: dict[str, Any]) -> None:
        key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
        for e in self.enforcers.values():
            e.on_policy(key, obj)

    def delete_policy(self, key: str) -> None:
        for e in self.enforcers.values():
            e.on_policy(key, None)

    def delete_all_policies(self) -> None:
        for e in self.enforcers.values():
            for key in list(e.model.policies):
                e.on_policy(key, None)

    def sync(self, full: bool = False) -> None:
        for e in self.enforcers.values():
            self.run(e.sync(full=full))

    # ------------------------------------------------------------------ traffic
    def ip(self, key: str) -> str:
        return self.pods[key]["status"]["podIP"]

    def connect(self, src: str, dst: str | tuple[str, str], port: int = 8080, timeout: float = 2.0) -> str:
        """From pod `src` to pod `dst` (or (ip, expected name)): "ok", "blocked" (policy REJECT) or the raw
        outcome (timeout, refused...)."""
        lab = self.labs[self.pod_node[src]]
        ns = lab.pod_netns(src.replace("/", "-"))
        if isinstance(dst, tuple):
            ip, expect = dst
        else:
            ip, expect = self.ip(dst), dst.replace("/", "-")
        (answer, _), = lab.connect(ns, "tcp", ip, port, timeout=timeout)
        if answer.split(" ")[0] == expect:
            return "ok"
        return "blocked" if answer == BLOCKED else answer

    def leftovers(self) -> list[str]:
        return [x for e in self.enforcers.values() for x in self.run(e.leftovers())]

    def cleanup(self) -> None:
        for e in self.enforcers.values():
            self.run(e.cleanup())

    def close(self) -> None:
        for w in self.workers:
            w.close()
        for lab in self.labs.values():
            lab.close()
        self.loop.close()

    def gone(self) -> bool:
        return all(lab.gone() for lab in self.labs.values())
