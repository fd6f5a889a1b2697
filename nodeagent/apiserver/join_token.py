"""The server's side of kubeadm's token discovery, run inside the apiserver: the join token and the join
command it prints (kubeadm init's bootstrap-token phase), the signed kube-public/cluster-info
(kube-controller-manager's bootstrapsigner) and expired tokens removed (its tokencleaner).

They stay with the apiserver, not the controller manager: the join command is written only once cluster-info
carries its token's signature, so a node that reads the command never finds an unsigned cluster-info. Tokens
authenticate in `bootstrap_auth`; the certificate a joining node asks for is approved and signed by the
controller manager (`controllers/csrapproving_controller.py`, `controllers/csrsigning_controller.py`).
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
from pathlib import Path
from typing import Any

import yaml

from nodeagent import pki
from nodeagent.api import bootstrap_token as tokens
from nodeagent.api.resources import builtin
from nodeagent.apiserver.bootstrap_auth import SECRETS, BootstrapTokenAuthenticator
from nodeagent.apiserver.errors import ApiError
from nodeagent.apiserver.registry import Registry
from nodeagent.clock import REAL_CLOCK, Clock, utcnow
from nodeagent.store import base as store_base

log = logging.getLogger("nodeagent.apiserver.join_token")
CONFIGMAPS = builtin("", "v1", "configmaps")
JOIN_FILE = "join-command"
DEFAULT_TOKEN_TTL = 24 * 3600.0  # kubeadm's default token lifetime


def cluster_info_kubeconfig(server_url: str, ca_pem: bytes) -> str:
    """kubeadm's cluster-info kubeconfig: one cluster (server + CA), no users."""
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "preferences": {},
        "clusters": [{"name": "", "cluster": {
            "server": server_url, "certificate-authority-data": base64.b64encode(ca_pem).decode()}}],
        "contexts": [], "current-context": "", "users": []}, sort_keys=False)


class JoinTokens:
    """The join token, the join command, and cluster-info signed for every live token."""

    def __init__(self, registry: Registry, authenticator: BootstrapTokenAuthenticator, data_dir: Path,
                 server_url: str, token_ttl: float = DEFAULT_TOKEN_TTL, clock: Clock = REAL_CLOCK) -> None:
        self.registry = registry
        self.clock = clock
        self.store = registry.store
        self.authenticator = authenticator
        self.data_dir = data_dir
        self.server_url = server_url
        self.token_ttl = token_ttl
        self.ca_cert, _ = pki.ensure_ca(data_dir / "pki")
        self.ca_pem = (data_dir / "pki" / "ca.crt").read_bytes()
        self.ca_hash = tokens.ca_cert_hash(self.ca_cert)
        self.token = ""
        self._kick = asyncio.Event()

    def kick(self) -> None:
        """Sweep now (a token Secret was created)."""
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
                token, self.token_ttl, "the join token nodeagent server printed", now=utcnow(self.clock)))
        self.token = token
        await self.sweep()
        line = tokens.join_command(self.server_url, token, self.ca_hash)
        pki.write_private(path, line + "\n")
        log.info("join command (%s): %s", path, line)
        print(f"join a node with: {line}", flush=True)
        return line

    async def _usable(self, token: str) -> bool:
        tid, tsecret = tokens.parse_token(token)
        secret = await self.authenticator.get(SECRETS.key(tokens.NAMESPACE, tokens.SECRET_PREFIX + tid))
        if secret is None:
            return False
        now = utcnow(self.clock)
        try:
            f = tokens.check_secret(secret, tid, tsecret, "authentication", now)
        except tokens.TokenError:
            return False
        exp = tokens.expiration(f)
        return exp is None or exp - now > dt.timedelta(seconds=self.token_ttl / 2)

    async def run(self, interval: float = 5.0) -> None:
        """Sweep every `interval` seconds, and at once when a token was created."""
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

    # ------------------------------------------------------------------ tokencleaner + bootstrapsigner
    async def _token_secrets(self) -> list[dict[str, Any]]:
        items, _ = await self.store.list(SECRETS.key_prefix(tokens.NAMESPACE))
        return [s for s in items if s.get("type") == tokens.SECRET_TYPE
                and s["metadata"]["name"].startswith(tokens.SECRET_PREFIX)]

    async def _clean_tokens(self) -> None:
        for s in await self._token_secrets():
            if tokens.is_expired(tokens.secret_fields(s), utcnow(self.clock)):
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
                f = tokens.check_secret(s, tid, None, "signing", utcnow(self.clock))
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


def _token_in(path: Path) -> str:
    try:
        words = path.read_text().split()
    except OSError:
        return ""
    for i, w in enumerate(words[:-1]):
        if w == "--token" and tokens.is_token(words[i + 1]):
            return words[i + 1]
    return ""

