"""The csrsigning loop: approved requests for the apiserver-client signers get a certificate from the cluster
CA (kube-controller-manager's `--cluster-signing-cert-file`/`--cluster-signing-key-file`); a request the CA
must not sign gets a Failed condition instead (`csr.sign`). Without the CA's files it signs nothing."""

from __future__ import annotations

import asyncio
import base64
import copy
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from nodeagent.api.certificates import condition
from nodeagent.client.rest import ClientError
from nodeagent.clock import utcnow
from nodeagent.controllers import csr
from nodeagent.controllers.base import Controller, SharedInformers
from nodeagent.controllers.csrapproving_controller import CSRS, is_settled, new_condition
from nodeagent.controllers.options import iso


def load_ca(cert_file: str | None, key_file: str | None) -> tuple[x509.Certificate, Any] | None:
    """The signing CA, or None when either file is not configured or not there."""
    if not cert_file or not key_file:
        return None
    try:
        return (x509.load_pem_x509_certificate(Path(cert_file).read_bytes()),
                serialization.load_pem_private_key(Path(key_file).read_bytes(), None))
    except (OSError, ValueError):
        return None


class CSRSigningController(Controller):
    name = "csrsigning"
    service_account = "certificate-controller"

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.ca = load_ca(self.options.cluster_signing_cert_file, self.options.cluster_signing_key_file)
        if self.ca is None:
            self.log.info("csrsigning: no cluster signing CA (%s, %s): signing nothing",
                          self.options.cluster_signing_cert_file, self.options.cluster_signing_key_file)
        self.csrs = informers.get(CSRS)
        self.csrs.add_handler(self.enqueue, lambda old, new: self.enqueue(new), None)

    async def reconcile(self, key: str) -> None:
        c = self.csrs.get(key)
        if self.ca is None or c is None or is_settled(c) or condition(c, "Approved") is None:
            return
        c = copy.deepcopy(c)
        st = c.setdefault("status", {})
        try:
            pem = await asyncio.to_thread(csr.sign, c, *self.ca, utcnow(self.options.clock))
            st["certificate"] = base64.b64encode(pem).decode()
        except csr.CSRError as e:
            st.setdefault("conditions", []).append(
                new_condition("Failed", "SignerValidationFailure", str(e), iso(utcnow(self.options.clock))))
        try:
            await self.client.update_status(CSRS, c)
        except ClientError as e:
            if not e.not_found:
                raise
            return
        self.log.info("csrsigning: CSR %s for %s: %s", c["metadata"]["name"],
                      (c.get("spec") or {}).get("username"), "signed" if st.get("certificate") else "failed")
