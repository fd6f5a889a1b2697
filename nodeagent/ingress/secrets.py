"""The Secrets the ingress serves certificates from, whatever their type.

ingress-nginx reads `tls.crt` and `tls.key` from the Secret an Ingress names, of any type (its store's
`getPemCertificate`), through an informer over every Secret. A credential that may list and watch every
Secret (the control plane's, ingress-nginx's ServiceAccount) does just that. A joined node's credential may
not: the Node authorizer lets it list the `kubernetes.io/tls` Secrets, and read one by name that an Ingress
of its namespace names in `spec.tls`; so there, the typed informer is joined by a single-object informer
(`fieldSelector=metadata.name=<name>`, as the kubelet reads its pods' Secrets) for each Secret an Ingress
names that the typed one does not hold.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from nodeagent.client.informer import SharedInformer, shared
from nodeagent.client.rest import Client, ClientError

log = logging.getLogger("nodeagent.ingress")

TLS_SECRETS = "type=kubernetes.io/tls"
Key = tuple[str, str]  # (namespace, name)


async def may_read_all(client: Client, retry: float = 1.0) -> bool:
    """Whether this client may list and watch every Secret (a SelfSubjectAccessReview each), asked again
    while the apiserver does not answer (a transport error, 5xx, 429); a refused review is a no."""
    logged = False
    for verb in ("list", "watch"):
        while True:
            try:
                out = await client.create("selfsubjectaccessreviews", {
                    "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": {"verb": verb, "resource": "secrets"}}})
                break
            except ClientError as e:
                if 400 <= e.code < 500 and e.code != 429:
                    log.warning("ingress: may not ask whether it may %s every Secret (%s)", verb, e)
                    return False
                if not logged:
                    log.info("ingress: cannot ask yet whether it may %s every Secret (%s); retrying", verb, e)
                    logged = True
                await asyncio.sleep(retry)
        st = out.get("status") or {}
        if not st.get("allowed") or st.get("denied"):
            return False
    return True


def named_by(ingresses: Iterable[dict[str, Any]]) -> set[Key]:
    """The Secrets the Ingresses name for TLS."""
    return {(i["metadata"].get("namespace", ""), t["secretName"])
            for i in ingresses for t in (i.get("spec") or {}).get("tls") or () if t.get("secretName")}


class TLSSecrets:
    """Every Secret (`all_types`), or the TLS ones plus a single-object informer per Secret an Ingress
    names beyond them; `changed` is called on any of their events."""

    def __init__(self, client: Client, all_types: bool, changed: Callable[..., None]) -> None:
        self.client = client
        self.all_types = all_types
        self.changed = changed
        self.main: SharedInformer = shared(client, "secrets",
                                           field_selector=None if all_types else TLS_SECRETS)
        self._named: dict[Key, tuple[SharedInformer, asyncio.Task[None], Callable[[], None]]] = {}

    def list(self) -> list[dict[str, Any]]:
        out = self.main.list()
        seen = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in out}
        for key, (inf, _, _) in self._named.items():
            out += [o for o in inf.list() if key not in seen]
        return out

    def follow(self, ingresses: Iterable[dict[str, Any]], tg: asyncio.TaskGroup) -> None:
        """Start a single-object informer for each Secret the Ingresses name that the TLS informer does not
        hold (none when every Secret is read); stop those no longer named."""
        wanted: set[Key] = set()
        if not self.all_types:
            wanted = {k for k in named_by(ingresses) if self.main.get(k[1], k[0]) is None}
        for key in [k for k in self._named if k not in wanted]:
            _, task, remove = self._named.pop(key)
            remove()
            task.cancel()
        for key in wanted - self._named.keys():
            ns, name = key
            log.info("ingress: reading Secret %s/%s by name (an Ingress names it; this credential lists "
                     "only kubernetes.io/tls ones)", ns, name)
            inf = shared(self.client, "secrets", namespace=ns, field_selector=f"metadata.name={name}")
            remove = inf.add_handler(self.changed, lambda _old, _new: self.changed(), self.changed)
            task = tg.create_task(inf.run(client=self.client), name=f"ingress-secret-{ns}/{name}")
            self._named[key] = (inf, task, remove)

    def stop(self) -> None:
        for _, task, remove in self._named.values():
            remove()
            task.cancel()
        self._named.clear()
