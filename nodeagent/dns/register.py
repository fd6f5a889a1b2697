"""`nodeagent dns --register-service`: the standalone server makes itself reachable at the `kube-dns` Service
ClusterIP (kube-system) with the credential it is given (`up`/`server` leave that to their apiserver's
bootstrap, so their DNS only reads). The objects are `nodeagent.api.kube_dns`'s. Idempotent:
an existing Service is kept (its ClusterIP is immutable; a different one is reported), the slice is
rewritten only when its endpoint or ports changed.
"""

from __future__ import annotations

import logging

from nodeagent.api.kube_dns import NAME, NAMESPACE, dns_endpoint_slice, dns_service
from nodeagent.client.rest import Client, ClientError

log = logging.getLogger("nodeagent.dns.register")


async def ensure_dns_service(client: Client, cluster_ip: str, endpoint_ip: str, port: int,
                             quiet: bool = False) -> str:
    """Create/repair the kube-dns Service and its slice; returns the Service's ClusterIP."""
    changed = True
    try:
        svc = await client.create("services", dns_service(cluster_ip), NAMESPACE)
    except ClientError as e:
        if not e.already_exists:
            raise
        svc = await client.get("services", NAME, NAMESPACE)
        changed = False
    have = (svc.get("spec") or {}).get("clusterIP", "")
    if have != cluster_ip:
        log.log(logging.DEBUG if quiet else logging.WARNING,
                "dns: %s/%s has ClusterIP %s (wanted %s); keeping it", NAMESPACE, NAME, have, cluster_ip)
    want = dns_endpoint_slice(endpoint_ip, port)
    try:
        await client.create("endpointslices.discovery.k8s.io", want, NAMESPACE)
        changed = True
    except ClientError as e:
        if not e.already_exists:
            raise
        cur = await client.get("endpointslices.discovery.k8s.io", want["metadata"]["name"], NAMESPACE)
        if (cur.get("endpoints"), cur.get("ports")) != (want["endpoints"], want["ports"]):
            cur.update(endpoints=want["endpoints"], ports=want["ports"])
            await client.update("endpointslices.discovery.k8s.io", cur, NAMESPACE)
            changed = True
    if changed:
        log.info("dns: %s/%s %s -> %s:%d", NAMESPACE, NAME, have, endpoint_ip, port)
    return have
