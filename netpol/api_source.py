"""The informer-backed source: NetworkPolicies, Pods and Namespaces from the apiserver feed the enforcer.

Handlers only update the in-memory model and ask for a sync; the enforcer's single writer programs
the kernel, and only after all three informers have delivered their first list.
"""

from __future__ import annotations

import asyncio
from typing import Any

from netpol.enforcer import Enforcer
from nodeagent.client.informer import SharedInformers, key_of

RESOURCES = ("namespaces", "pods", "networkpolicies")


def _labels(o: dict[str, Any]) -> dict[str, str]:
    return dict((o.get("metadata") or {}).get("labels") or {})


def wire(informers: SharedInformers, enforcer: Enforcer) -> None:
    """Connect the three shared informers to the enforcer's model (`informers.release()` disconnects)."""
    informers.add_handler("namespaces", lambda o: enforcer.on_namespace(o["metadata"]["name"], _labels(o)),
                          lambda old, new: enforcer.on_namespace(new["metadata"]["name"], _labels(new)),
                          lambda o: enforcer.on_namespace(o["metadata"]["name"], None))
    informers.add_handler("pods", lambda o: enforcer.on_pod(key_of(o), o),
                          lambda old, new: enforcer.on_pod(key_of(new), new),
                          lambda o: enforcer.on_pod(key_of(o), None))
    informers.add_handler("networkpolicies", lambda o: enforcer.on_policy(key_of(o), o),
                          lambda old, new: enforcer.on_policy(key_of(new), new),
                          lambda o: enforcer.on_policy(key_of(o), None))


async def run(informers: SharedInformers, enforcer: Enforcer) -> None:
    """Run the informers (until cancelled) and tell the enforcer once each has listed."""
    async with asyncio.TaskGroup() as tg:
        infs = [informers.get(r) for r in RESOURCES]
        for r, inf in zip(RESOURCES, infs, strict=True):
            tg.create_task(inf.run(client=informers.client), name=f"netpol-{r}")
        for inf in infs:
            await inf.wait_synced()
            enforcer.source_synced()
