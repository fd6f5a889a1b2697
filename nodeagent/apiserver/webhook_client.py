"""Posting an AdmissionReview to a webhook: its clientConfig (a URL, or a Service resolved through its
EndpointSlices to a ready endpoint's address and target port, as kube-apiserver's endpoint service resolver
does) over HTTPS verified against the caBundle (the system's roots when there is none), the server name
being the URL's host or `<service>.<namespace>.svc`.

Failures are `CallFailed` with Go's wording (`Post "<url>": dial tcp …: connect: connection refused`,
`… context deadline exceeded`), which the dispatcher wraps in kube-apiserver's `failed calling webhook`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import random
import ssl
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from nodeagent.api.resources import Resource, builtin

SERVICES = builtin("", "v1", "services")
ENDPOINT_SLICES = builtin("discovery.k8s.io", "v1", "endpointslices")
Lookup = Callable[[Resource, "str | None"], Awaitable[list[dict[str, Any]]]]


class CallFailed(Exception):
    """The webhook could not be called (resolution, connection, TLS, timeout, HTTP status)."""


class WebhookClient:
    """One HTTP session for every webhook call of an apiserver; TLS contexts cached by caBundle."""

    def __init__(self, lookup: Lookup) -> None:
        self._lookup = lookup
        self._session: aiohttp.ClientSession | None = None
        self._contexts: dict[str, ssl.SSLContext] = {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def display_url(self, client_config: Mapping[str, Any], timeout: int) -> str:
        """The URL as kube-apiserver's messages show it (the Service's DNS name, ?timeout=Ns)."""
        service = client_config.get("service")
        if isinstance(service, Mapping):
            base = (f"https://{service.get('name')}.{service.get('namespace')}.svc:{service.get('port', 443)}"
                    f"{service.get('path') or ''}")
        else:
            base = str(client_config.get("url") or "")
        return f"{base}?timeout={timeout}s"

    async def post(self, client_config: Mapping[str, Any], body: bytes, seconds: int) -> bytes:
        """POST `body` within `seconds`; the response body of a 2xx answer, CallFailed otherwise."""
        timeout = seconds
        shown = self.display_url(client_config, timeout)
        target, server_name = await self._resolve(client_config)
        url = f"{target}?timeout={timeout}s"
        ctx = self._context(client_config.get("caBundle"))
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        try:
            async with asyncio.timeout(timeout):
                async with self._session.post(
                        url, data=body, ssl=ctx, server_hostname=server_name,
                        headers={"Content-Type": "application/json", "Accept": "application/json",
                                 "Host": urlsplit(shown).netloc}) as resp:
                    data = await resp.read()
        except TimeoutError:
            raise CallFailed(f'Post "{shown}": context deadline exceeded') from None
        except aiohttp.ClientConnectorCertificateError as e:
            raise CallFailed(f'Post "{shown}": tls: failed to verify certificate: {e.certificate_error}') \
                from None
        except aiohttp.ClientConnectorError as e:
            why = "connection refused" if isinstance(e.os_error, ConnectionRefusedError) else \
                (e.os_error.strerror or str(e.os_error)).lower()
            host = urlsplit(url).netloc
            raise CallFailed(f'Post "{shown}": dial tcp {host}: connect: {why}') from None
        except (aiohttp.ClientError, OSError) as e:
            raise CallFailed(f'Post "{shown}": {e or type(e).__name__}') from None
        if not 200 <= resp.status < 300:
            raise CallFailed(_status_message(resp.status, data))
        return data

    async def _resolve(self, client_config: Mapping[str, Any]) -> tuple[str, str]:
        """(the URL to connect to, the TLS server name)."""
        url = client_config.get("url")
        if url:
            return str(url), urlsplit(str(url)).hostname or ""
        service = client_config.get("service") or {}
        ns, name = str(service.get("namespace") or ""), str(service.get("name") or "")
        port = int(service.get("port") or 443)
        svc = next((s for s in await self._lookup(SERVICES, ns) if s["metadata"]["name"] == name), None)
        if svc is None:
            raise CallFailed(f'services "{name}" not found')
        ports = (svc.get("spec") or {}).get("ports") or ()
        svc_port = next((p for p in ports if p.get("port") == port), None)
        if svc_port is None:
            raise CallFailed(f'no service port {port} found for service "{name}"')
        addresses: list[tuple[str, int]] = []
        for sl in await self._lookup(ENDPOINT_SLICES, ns):
            if ((sl.get("metadata") or {}).get("labels") or {}).get("kubernetes.io/service-name") != name:
                continue
            target = next((p.get("port") for p in sl.get("ports") or ()
                           if (p.get("name") or "") == (svc_port.get("name") or "")), None)
            if target is None:
                continue
            for ep in sl.get("endpoints") or ():
                if (ep.get("conditions") or {}).get("ready") is False:
                    continue
                addresses += [(a, int(target)) for a in ep.get("addresses") or ()]
        if not addresses:
            raise CallFailed(f'service "{ns}/{name}" has no endpoints available')
        ip, target_port = random.choice(addresses)
        host = f"[{ip}]" if ":" in ip else ip
        return urlunsplit(("https", f"{host}:{target_port}", str(service.get("path") or "/"), "", "")), \
            f"{name}.{ns}.svc"

    def _context(self, ca_bundle: Any) -> ssl.SSLContext:
        key = str(ca_bundle or "")
        ctx = self._contexts.get(key)
        if ctx is None:
            if ca_bundle:
                try:
                    pem = base64.b64decode(str(ca_bundle), validate=True).decode()
                    ctx = ssl.create_default_context(cadata=pem)
                except (binascii.Error, UnicodeDecodeError, ssl.SSLError) as e:
                    raise CallFailed(f"unable to load root certificates: {e}") from None
            else:
                ctx = ssl.create_default_context()
            self._contexts[key] = ctx
        return ctx


def _status_message(code: int, data: bytes) -> str:
    """What client-go's REST client says of a non-2xx answer."""
    text = data.decode("utf-8", "replace").strip()
    if text:
        return f'an error on the server ("{text[:256]}") has prevented the request from succeeding'
    return f"the server responded with the status code {code} but did not return more information"
