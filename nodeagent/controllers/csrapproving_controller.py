"""The csrapproving loop: approves a kubelet's client-certificate request when it is what a joining (or the
same) node may ask for (`csr.approval`); anything else waits for `kubectl certificate approve`."""

from __future__ import annotations

import copy

from nodeagent.api.certificates import condition
from nodeagent.client.rest import ClientError
from nodeagent.clock import utcnow
from nodeagent.controllers import csr
from nodeagent.controllers.base import Controller, SharedInformers
from nodeagent.controllers.options import iso

CSRS = "certificatesigningrequests"


def new_condition(type_: str, reason: str, message: str, now: str) -> dict[str, str]:
    return {"type": type_, "status": "True", "reason": reason, "message": message,
            "lastUpdateTime": now, "lastTransitionTime": now}


def is_settled(c: dict) -> bool:
    """Signed, denied or failed: nothing left for either loop."""
    signed = (c.get("status") or {}).get("certificate")
    return bool(signed or condition(c, "Denied") or condition(c, "Failed"))


class CSRApprovingController(Controller):
    name = "csrapproving"
    service_account = "certificate-controller"

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.csrs = informers.get(CSRS)
        self.csrs.add_handler(self.enqueue, lambda old, new: self.enqueue(new), None)

    async def reconcile(self, key: str) -> None:
        c = self.csrs.get(key)
        if c is None or is_settled(c) or condition(c, "Approved") is not None:
            return
        reason = csr.approval(c)
        if reason is None:
            return  # left to an administrator (`kubectl certificate approve`)
        c = copy.deepcopy(c)
        st = c.setdefault("status", {})
        st.setdefault("conditions", []).append(
            new_condition("Approved", "AutoApproved", reason, iso(utcnow(self.options.clock))))
        try:
            await self.client.update(CSRS, c, subresource="approval")
        except ClientError as e:
            if not e.not_found:
                raise
