"""The LoadBalancer service controller: `status.loadBalancer.ingress[].ip` from `--service-lb-pool`.

kube-controller-manager's service controller with MetalLB's allocator in place of a cloud (decisions in
`servicelb.py`). One worker, so two Services never pick the same free address at once; what it wrote
is remembered until the cache shows it, so a lagging cache cannot hand an address out twice. Events
are sent only when the decision changes (a pending Service re-synced is not a new event).
"""

from __future__ import annotations

from typing import Any

from nodeagent.api import service_lb
from nodeagent.client.loadbalancer import set_load_balancer_status
from nodeagent.client.rest import ClientError
from nodeagent.controllers import servicelb
from nodeagent.controllers.base import Controller, SharedInformers, split_key


class ServiceLBController(Controller):
    name = "service-lb-controller"
    service_account = "service-controller"
    workers = 1

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.pool = service_lb.parse_pool(self.options.service_lb_pool)
        self.services = informers.get("services")
        self._written: dict[str, tuple[str, ...]] = {}  # key -> addresses written, until the cache has them
        self._last_event: dict[str, tuple[str, str, str]] = {}
        self.services.add_handler(self._changed, lambda old, new: self._updated(old, new), self._deleted)

    def _changed(self, svc: dict[str, Any]) -> None:
        if service_lb.is_load_balancer(svc) or service_lb.ingress_ips(svc):
            self.enqueue(svc)

    def _updated(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        if any(service_lb.is_load_balancer(o) for o in (old, new)) or service_lb.ingress_ips(new):
            self.enqueue(new)

    def _deleted(self, svc: dict[str, Any]) -> None:
        key = service_lb.key(svc)
        self._written.pop(key, None)
        self._last_event.pop(key, None)
        if service_lb.ingress_ips(svc):
            # its address is free again: a Service waiting for one may take it now
            for other in self.services.list():
                if service_lb.is_ours(other) and not service_lb.ingress_ips(other):
                    self.enqueue(other)

    def _view(self) -> list[dict[str, Any]]:
        """The cached Services, with what this controller wrote and the cache does not show yet."""
        out = []
        for s in self.services.list():
            k = service_lb.key(s)
            if k in self._written:
                if service_lb.ingress_ips(s) == self._written[k]:
                    del self._written[k]
                else:
                    ingress = [{"ip": ip} for ip in self._written[k]]
                    s = {**s, "status": {"loadBalancer": {"ingress": ingress}}}
            out.append(s)
        return out

    async def reconcile(self, key: str) -> None:
        ns, name = split_key(key)
        svc = self.services.get(name, ns)
        if svc is None or (svc.get("metadata") or {}).get("deletionTimestamp"):
            self._written.pop(key, None)
            return
        view = self._view()
        current = next((s for s in view if service_lb.key(s) == key), svc)
        decision = servicelb.decide(current, servicelb.usage(view, self.pool), self.pool)
        if decision.ips is None:
            return
        try:
            if await set_load_balancer_status(self.client, "services", svc, decision.ips):
                self._written[key] = decision.ips
        except ClientError as e:
            if e.not_found:
                return
            raise
        if decision.event is None:
            self._last_event.pop(key, None)
        elif self._last_event.get(key) != decision.event:
            self._last_event[key] = decision.event
            self.recorder.record(svc, *decision.event)
            self.log.info("%s: %s: %s", key, decision.event[1], decision.event[2])
        if not decision.ips and service_lb.ingress_ips(svc):
            # an address went back to the pool: a Service waiting for one may take it now
            for other in self.services.list():
                if service_lb.is_ours(other) and not service_lb.ingress_ips(other) and \
                        service_lb.key(other) != key:
                    self.enqueue(other)
