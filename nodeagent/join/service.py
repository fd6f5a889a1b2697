"""The server's side of joining: the join token and command, the signed kube-public/cluster-info,
bootstrap-token authentication, and the CSR approver/signer (kube-controller-manager's bootstrapsigner,
tokencleaner, csrapproving and csrsigning, run inside the apiserver process, which holds the CA key).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
from pathlib import Path
from typing import Any

import yaml

from nodeagent.api.times import now_rfc3339
from nodeagent.apiserver import auth, pki
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.registry import Registry
from nodeagent.apiserver.resources import lookup
from nodeagent.join import csr as csrs
from nodeagent.join import tokens
from nodeagent.store import base as store_base

log = logging.getLogger("nodeagent.join")
SECRETS = lookup("", "v1", "secrets")
CONFIGMAPS = lookup("", "v1", "configmaps")
CSRS = lookup("certificates.k8s.io", "v1", "certificatesigningrequests")
JOIN_FILE = "join-command"
DEFAULT_TOKEN_TTL = 24 * 3600.0  # kubeadm's default token lifetime


def join_command(server_url: str, token: str, ca_hash: str) -> str:
    return f"nodeagent agent --server {server_url} --token {token} --ca-cert-hash {ca_hash}"


def cluster_info_kubeconfig(server_url: str, ca_pem: bytes) -> str:
    """kubeadm's cluster-info kubeconfig: one cluster (server + CA), no users."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "", "cluster": {"server": server_url,
                                              "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "contexts": [], "current-context": "", "users": []}, sort_keys=False)


class JoinService:
    def __init__(self, registry: Registry, cache: Any, data_dir: Path, server_url: str,
                 token_ttl: float = DEFAULT_TOKEN_TTL) -> None:
        self.registry = registry
        self.store = registry.store
        self.cache = cache
        self.data_dir = data_dir
        self.server_url = server_url
        self.token_ttl = token_ttl
        self.ca_cert, self.ca_key = pki.ensure_ca(data_dir / "pki")
        self.ca_pem = (data_dir / "pki" / "ca.crt").read_bytes()
        self.ca_hash = tokens.ca_cert_hash(self.ca_cert)
        self.token = ""
        self._kick = asyncio.Event()

    # ------------------------------------------------------------------ authentication
    async def authenticate(self, header: str | None) -> auth.User | None:
        """A live bootstrap token → system:bootstrap:<id> in system:bootstrappers; anything else → None."""
        if not header or not header.startswith("Bearer "):
            return None
        value = header[7:].strip()
        if not tokens.is_token(value):
            return None
        tid, tsecret = tokens.parse_token(value)
        secret = await self._get(SECRETS.key(tokens.NAMESPACE, tokens.SECRET_PREFIX + tid))
        if secret is None:
            return None
        try:
            fields = tokens.check_secret(secret, tid, tsecret, "authentication")
        except tokens.TokenError as e:
            log.info("bootstrap token %s refused: %s", tid, e)
            return None
        return auth.User(tokens.USER_PREFIX + tid, tokens.token_groups(fields))

    async def _get(self, key: str) -> dict[str, Any] | None:
        entry = self.cache.get(key) if self.cache is not None else None
        if entry is not None:
            return entry.obj
        try:
            return await self.store.get(key)
        except store_base.NotFound:
            return None

    def kick(self) -> None:
        """Sweep now (a CSR was created or approved)."""
        self._kick.set()

    def admit_csr(self, body: Any, user: auth.User) -> None:
        """The apiserver records who asked (spec.username/groups), as the CSR strategy does."""
        if isinstance(body, dict):
            spec = body.setdefault("spec", {})
            spec["username"], spec["groups"] = user.name, list(user.groups) + ["system:authenticated"]
            spec.pop("uid", None)
            self._kick.set()

    # ------------------------------------------------------------------ start
    async def start(self) -> str:
        """Make sure a join token exists; publish cluster-info; write and print the join command."""
        path = self.data_dir / JOIN_FILE
        token = _token_in(path)
        if token and not await self._usable(token):
            token = ""
        if not token:
            token = tokens.generate_token()
            await self.registry.create(SECRETS, tokens.NAMESPACE, tokens.token_secret(
                token, self.token_ttl, "the join token nodeagent server printed"))
        self.token = token
        await self.sweep()
        line = join_command(self.server_url, token, self.ca_hash)
        pki.write_private(path, line + "\n")
        log.info("join command (%s): %s", path, line)
        print(f"join a node with: {line}", flush=True)
        return line

    async def _usable(self, token: str) -> bool:
        tid, tsecret = tokens.parse_token(token)
        secret = await self._get(SECRETS.key(tokens.NAMESPACE, tokens.SECRET_PREFIX + tid))
        if secret is None:
            return False
        try:
            f = tokens.check_secret(secret, tid, tsecret, "authentication")
        except tokens.TokenError:
            return False
        exp = tokens.expiration(f)
        return exp is None or exp - dt.datetime.now(dt.UTC) > dt.timedelta(seconds=self.token_ttl / 2)

    async def run(self, interval: float = 5.0) -> None:
        """Sweep every `interval` seconds, and at once when a CSR was created."""
        while True:
            try:
                async with asyncio.timeout(interval):  # not wait_for: on 3.11 it can lose a cancel
                    await self._kick.wait()
            except TimeoutError:
                pass
            self._kick.clear()
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("join: sweep")

    async def sweep(self) -> None:
        await self._clean_tokens()
        await self._publish_cluster_info()
        await self._process_csrs()

    # ------------------------------------------------------------------ tokencleaner + bootstrapsigner
    async def _token_secrets(self) -> list[dict[str, Any]]:
        items, _ = await self.store.list(SECRETS.key_prefix(tokens.NAMESPACE))
        return [s for s in items if s.get("type") == tokens.SECRET_TYPE
                and s["metadata"]["name"].startswith(tokens.SECRET_PREFIX)]

    async def _clean_tokens(self) -> None:
        for s in await self._token_secrets():
            if tokens.is_expired(tokens.secret_fields(s)):
                try:
                    await self.store.delete(SECRETS.key(tokens.NAMESPACE, s["metadata"]["name"]))
                    log.info("join: deleted expired bootstrap token %s", s["metadata"]["name"])
                except store_base.StoreError:
                    pass

    async def _publish_cluster_info(self) -> None:
        kubeconfig = cluster_info_kubeconfig(self.server_url, self.ca_pem)
        data = {"kubeconfig": kubeconfig}
        for s in await self._token_secrets():
            tid = s["metadata"]["name"][len(tokens.SECRET_PREFIX):]
            try:
                f = tokens.check_secret(s, tid, None, "signing")
            except tokens.TokenError:
                continue
            data[tokens.JWS_PREFIX + tid] = tokens.sign_detached(kubeconfig, tid, f.get("token-secret", ""))
        key = CONFIGMAPS.key("kube-public", "cluster-info")
        try:
            cm = await self.store.get(key)
        except store_base.NotFound:
            try:
                await self.registry.create(CONFIGMAPS, "kube-public", {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "cluster-info", "namespace": "kube-public"}, "data": data})
            except ApiError as e:
                if e.code != 409:
                    raise
            return
        if cm.get("data") != data:
            cm["data"] = data
            try:
                await self.store.update(key, cm, int(cm["metadata"]["resourceVersion"]))
            except (store_base.Conflict, store_base.NotFound):
                self._kick.set()

    # ------------------------------------------------------------------ csrapproving + csrsigning
    async def _process_csrs(self) -> None:
        items, _ = await self.store.list(CSRS.key_prefix())
        for c in items:
            st = c.get("status") or {}
            if st.get("certificate") or csrs.condition(c, "Denied") or csrs.condition(c, "Failed"):
                continue
            changed = False
            if csrs.condition(c, "Approved") is None:
                reason = csrs.approval(c)
                if reason is None:
                    continue  # left to an administrator (`kubectl certificate approve`)
                st.setdefault("conditions", []).append(_condition("Approved", "AutoApproved", reason))
                changed = True
            if csrs.condition(c, "Approved") is not None:
                try:
                    pem = await asyncio.to_thread(csrs.sign, c, self.ca_cert, self.ca_key)
                    st["certificate"] = base64.b64encode(pem).decode()
                except csrs.CSRError as e:
                    st.setdefault("conditions", []).append(_condition("Failed", "SignerValidationFailure", str(e)))
                changed = True
            if changed:
                c["status"] = st
                try:
                    await self.store.update(CSRS.key(None, c["metadata"]["name"]), c,
                                            int(c["metadata"]["resourceVersion"]))
                    log.info("join: CSR %s for %s: %s", c["metadata"]["name"], (c.get("spec") or {}).get("username"),
                             "signed" if st.get("certificate") else "failed")
                except (store_base.Conflict, store_base.NotFound):
                    self._kick.set()


def _condition(type_: str, reason: str, message: str) -> dict[str, Any]:
    now = now_rfc3339()
    return {"type": type_, "status": "True", "reason": reason, "message": message,
            "lastUpdateTime": now, "lastTransitionTime": now}


def _token_in(path: Path) -> str:
    try:
        words = path.read_text().split()
    except OSError:
        return ""
    for i, w in enumerate(words[:-1]):
        if w == "--token" and tokens.is_token(words[i + 1]):
            return words[i + 1]
    return ""

