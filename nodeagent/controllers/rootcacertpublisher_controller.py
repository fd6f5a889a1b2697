"""kube-controller-manager's root-ca-cert-publisher: every active namespace has a `kube-root-ca.crt`
ConfigMap holding the cluster CA (`ca.crt`), put back when deleted or edited; pods' projected
ServiceAccount volumes read it to verify the apiserver."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodeagent.client.rest import ClientError
from nodeagent.controllers.base import Controller, SharedInformers

NAME = "kube-root-ca.crt"
DESCRIPTION = ("Contains a CA bundle that can be used to verify the kube-apiserver when using internal "
               "endpoints such as the internal service IP or kubernetes.default.svc. No other usage is "
               "guaranteed across distributions of Kubernetes clusters.")
ANNOTATION = "kubernetes.io/description"


class RootCACertPublisher(Controller):
    name = "root-ca-cert-publisher"

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.ca = ""
        if self.options.root_ca_file:
            try:
                self.ca = Path(self.options.root_ca_file).read_text()
            except OSError as e:
                self.log.warning("root-ca-cert-publisher: cannot read %s (%s): publishing nothing",
                                 self.options.root_ca_file, e)
        self.namespaces = informers.get("namespaces")
        self.configmaps = informers.get("configmaps")
        self.namespaces.add_handler(self.enqueue, lambda old, new: self.enqueue(new), None)
        self.configmaps.add_handler(None, lambda old, new: self._cm(new), self._cm)

    def _cm(self, cm: dict[str, Any]) -> None:
        if cm["metadata"]["name"] == NAME and cm["metadata"].get("namespace"):
            self.queue.add(cm["metadata"]["namespace"])

    async def reconcile(self, key: str) -> None:
        ns = self.namespaces.get(key)
        if not self.ca or ns is None or ns["metadata"].get("deletionTimestamp") \
                or (ns.get("status") or {}).get("phase") == "Terminating":
            return
        cm = self.configmaps.get(NAME, key)
        want = {"ca.crt": self.ca}
        try:
            if cm is None:
                await self.client.create("configmaps", {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": NAME, "namespace": key, "annotations": {ANNOTATION: DESCRIPTION}},
                    "data": want}, key)
            elif cm.get("data") != want or (cm["metadata"].get("annotations") or {}).get(ANNOTATION) \
                    != DESCRIPTION:
                cm = {**cm, "data": want, "metadata": {**cm["metadata"], "annotations": {
                    **(cm["metadata"].get("annotations") or {}), ANNOTATION: DESCRIPTION}}}
                cm.pop("binaryData", None)
                await self.client.update("configmaps", cm, key)
        except ClientError as e:
            if not (e.already_exists or e.not_found or e.conflict or e.code == 403):
                raise
            if e.conflict:
                self.queue.add_rate_limited(key)
