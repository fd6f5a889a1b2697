"""kube-controller-manager's serviceaccount-token controller (TokensController): a Secret of type
`kubernetes.io/service-account-token` naming a ServiceAccount (annotation
`kubernetes.io/service-account.name`) is filled with a legacy token for it, `ca.crt` and `namespace`;
one whose ServiceAccount is gone (or was recreated with another uid) is deleted. Since 1.24 nothing
creates such Secrets by itself: a user asks for one by creating it."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization

from nodeagent.api import sa_token
from nodeagent.client.rest import ClientError
from nodeagent.controllers.base import Controller, SharedInformers, split_key

TOKEN_TYPE = "kubernetes.io/service-account-token"
NAME_ANNOTATION = "kubernetes.io/service-account.name"
UID_ANNOTATION = "kubernetes.io/service-account.uid"


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


class ServiceAccountTokenController(Controller):
    name = "serviceaccount-token"

    def __init__(self, client, informers: SharedInformers, recorder, options=None) -> None:
        super().__init__(client, informers, recorder, options)
        self.key: Any = None
        self.ca = ""
        try:
            if self.options.service_account_private_key_file:
                pem = Path(self.options.service_account_private_key_file).read_bytes()
                self.key = serialization.load_pem_private_key(pem, None)
            if self.options.root_ca_file:
                self.ca = Path(self.options.root_ca_file).read_text()
        except (OSError, ValueError) as e:
            self.log.warning("serviceaccount-token: no signing key (%s, %s): %s; token Secrets stay empty",
                             self.options.service_account_private_key_file, self.options.root_ca_file, e)
            self.key = None
        self.secrets = informers.get("secrets")
        self.accounts = informers.get("serviceaccounts")
        self.secrets.add_handler(self.enqueue, lambda old, new: self.enqueue(new), None)
        self.accounts.add_handler(None, None, self._sa_deleted)

    def _sa_deleted(self, sa: dict[str, Any]) -> None:
        m = sa["metadata"]
        for s in self.secrets.list():
            if s["metadata"].get("namespace") == m.get("namespace") and s.get("type") == TOKEN_TYPE \
                    and (s["metadata"].get("annotations") or {}).get(NAME_ANNOTATION) == m["name"]:
                self.enqueue(s)

    async def _account(self, ns: str, name: str) -> dict[str, Any] | None:
        """From the informer, else the apiserver (a ServiceAccount created a moment before its Secret)."""
        sa = self.accounts.get(name, ns)
        if sa is not None:
            return sa
        try:
            return await self.client.get("serviceaccounts", name, ns)
        except ClientError as e:
            if e.not_found:
                return None
            raise

    async def reconcile(self, key: str) -> None:
        ns, name = split_key(key)
        secret = self.secrets.get(name, ns)
        if ns is None or secret is None or secret.get("type") != TOKEN_TYPE \
                or secret["metadata"].get("deletionTimestamp"):
            return
        ann = secret["metadata"].get("annotations") or {}
        sa = await self._account(ns, ann.get(NAME_ANNOTATION, ""))
        uid = ann.get(UID_ANNOTATION)
        if sa is None or (uid and uid != sa["metadata"].get("uid")):
            try:
                await self.client.delete("secrets", name, ns,
                                         preconditions={"uid": secret["metadata"]["uid"]})
            except ClientError as e:
                if not (e.not_found or e.conflict):
                    raise
            return
        data = secret.get("data") or {}
        if self.key is None or (data.get("token") and data.get("ca.crt") and data.get("namespace")):
            return
        out = copy.deepcopy(secret)
        out["metadata"].setdefault("annotations", {})[UID_ANNOTATION] = sa["metadata"].get("uid", "")
        filled = out.setdefault("data", {})
        if not filled.get("token"):
            filled["token"] = _b64(sa_token.sign(self.key, sa_token.legacy_claims(sa, secret)))
        filled.setdefault("ca.crt", _b64(self.ca))
        filled.setdefault("namespace", _b64(ns))
        try:
            await self.client.update("secrets", out, ns)
        except ClientError as e:
            if e.conflict:
                self.queue.add_rate_limited(key)
            elif not e.not_found:
                raise
