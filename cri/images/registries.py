"""Registry configuration in k3s's `registries.yaml` format, and the endpoints a pull tries in order.

    mirrors:
      docker.io:                       # or "*" for every registry without its own entry
        endpoint: ["http://127.0.0.1:5000", "https://mirror.example.com"]
        rewrite: {"^rancher/(.*)": "mirrorproject/rancher-images/$1"}
    configs:
      "127.0.0.1:5000":                # an endpoint's host[:port]
        auth: {username: u, password: p}          # or auth: base64(u:p), identity_token
        tls: {insecure_skip_verify: false, ca_file: ..., cert_file: ..., key_file: ...}

As in k3s/containerd, the registry's own (default) endpoint is always tried last, and rewrites apply
only to mirror endpoints. docker.io's default endpoint is https://registry-1.docker.io; loopback
registries are tried over HTTPS and then plain HTTP.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from pathlib import Path
from urllib.parse import urlsplit

from cri.images.errors import InvalidReference
from cri.images.reference import DEFAULT_DOMAIN, Reference

DEFAULT_PATH = Path("/etc/nodeagent/registries.yaml")
DOCKER_HUB_ENDPOINT = "https://registry-1.docker.io"


class RegistriesConfigError(InvalidReference):
    """registries.yaml is malformed."""


@dataclasses.dataclass(frozen=True)
class TLSConfig:
    insecure_skip_verify: bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""


@dataclasses.dataclass(frozen=True)
class AuthConfig:
    """Credentials as CRI's AuthConfig and registries.yaml carry them."""

    username: str = ""
    password: str = ""
    auth: str = ""  # base64("username:password")
    identity_token: str = ""  # an OAuth2 refresh token for the token endpoint
    registry_token: str = ""  # a bearer token sent as is

    @classmethod
    def from_dict(cls, d: dict | None) -> AuthConfig | None:
        if not d:
            return None
        fields = {f.name for f in dataclasses.fields(cls)}
        vals = {k: str(v) for k, v in d.items() if k in fields and v}
        return cls(**vals) if vals else None

    def basic(self) -> tuple[str, str] | None:
        """(username, password) from username/password or the base64 `auth` field."""
        if self.username or self.password:
            return self.username, self.password
        if self.auth:
            import base64
            import binascii

            try:
                user, _, pw = base64.b64decode(self.auth).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return None
            return user, pw
        return None


@dataclasses.dataclass(frozen=True)
class Mirror:
    endpoints: tuple[str, ...] = ()
    rewrites: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(frozen=True)
class HostConfig:
    auth: AuthConfig | None = None
    tls: TLSConfig | None = None


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One place to try: base URL (scheme://host[:port]), the repository path there, TLS and credentials."""

    url: str
    repository: str
    tls: TLSConfig | None = None
    auth: AuthConfig | None = None
    is_default: bool = False

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc

    @property
    def plain_http(self) -> bool:
        return self.url.startswith("http://")


def _normalise_endpoint(url: str) -> str:
    url = str(url).strip()
    if "://" not in url:
        url = "https://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise RegistriesConfigError(f"invalid mirror endpoint {url!r}")
    path = parts.path.rstrip("/")
    if path.endswith("/v2"):
        path = path[:-3]
    return f"{parts.scheme}://{parts.netloc}{path}"


def _go_replacement(repl: str) -> str:
    """Go regexp replacement ($1, ${1}, ${name}) to Python's (\\g<1>)."""
    repl = repl.replace("\\", "\\\\")
    repl = re.sub(r"\$\{(\w+)\}", r"\\g<\1>", repl)
    return re.sub(r"\$(\d+)", r"\\g<\1>", repl)


def _is_loopback(host: str) -> bool:
    name = urlsplit("//" + host).hostname or ""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclasses.dataclass
class RegistriesConfig:
    mirrors: dict[str, Mirror] = dataclasses.field(default_factory=dict)
    configs: dict[str, HostConfig] = dataclasses.field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | str | None = None) -> RegistriesConfig:
        """Parse a registries.yaml; a missing default file means no configuration."""
        import yaml

        p = Path(path) if path else DEFAULT_PATH
        if not p.exists():
            if path is None:
                return cls()
            raise FileNotFoundError(f"registries file {p} not found")
        try:
            doc = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise RegistriesConfigError(f"{p}: {e}") from None
        return cls.from_dict(doc, str(p))

    @classmethod
    def from_dict(cls, doc: dict, origin: str = "registries.yaml") -> RegistriesConfig:
        if not isinstance(doc, dict):
            raise RegistriesConfigError(f"{origin}: top level must be a mapping")
        mirrors: dict[str, Mirror] = {}
        for name, m in (doc.get("mirrors") or {}).items():
            if not isinstance(m, dict):
                raise RegistriesConfigError(f"{origin}: mirrors.{name} must be a mapping")
            eps = m.get("endpoint") or []
            if isinstance(eps, str):
                eps = [eps]
            rewrites = []
            for pattern, repl in (m.get("rewrite") or {}).items():
                try:
                    re.compile(pattern)
                except re.error as e:
                    raise RegistriesConfigError(
                        f"{origin}: mirrors.{name}.rewrite {pattern!r}: {e}") from None
                rewrites.append((str(pattern), _go_replacement(str(repl))))
            key = "docker.io" if name in ("index.docker.io", "registry-1.docker.io") else str(name)
            mirrors[key] = Mirror(tuple(_normalise_endpoint(e) for e in eps), tuple(rewrites))
        configs: dict[str, HostConfig] = {}
        for host, c in (doc.get("configs") or {}).items():
            c = c or {}
            if not isinstance(c, dict):
                raise RegistriesConfigError(f"{origin}: configs.{host} must be a mapping")
            tls = c.get("tls")
            tls_cfg = None
            if tls:
                tls_cfg = TLSConfig(bool(tls.get("insecure_skip_verify", False)),
                                    str(tls.get("ca_file") or ""), str(tls.get("cert_file") or ""),
                                    str(tls.get("key_file") or ""))
            key = urlsplit(host).netloc if "://" in str(host) else str(host)
            configs[key] = HostConfig(AuthConfig.from_dict(c.get("auth")), tls_cfg)
        return cls(mirrors, configs)

    def host_config(self, host: str) -> HostConfig:
        if host in self.configs:
            return self.configs[host]
        name = urlsplit("//" + host).hostname or host
        return self.configs.get(name) or self.configs.get("*") or HostConfig()

    def default_endpoints(self, domain: str) -> list[str]:
        if domain == DEFAULT_DOMAIN:
            return [DOCKER_HUB_ENDPOINT]
        cfg = self.host_config(domain)
        if _is_loopback(domain) and not cfg.tls:
            return [f"https://{domain}", f"http://{domain}"]  # containerd's localhost HTTP fallback
        return [f"https://{domain}"]

    def endpoints(self, ref: Reference, request_auth: AuthConfig | None = None) -> list[Endpoint]:
        """Mirrors in order (rewrites applied), then the registry itself; duplicates dropped."""
        mirror = self.mirrors.get(ref.domain) or self.mirrors.get("*") or Mirror()
        out: list[Endpoint] = []
        seen: set[str] = set()
        defaults = self.default_endpoints(ref.domain)
        for url in mirror.endpoints:
            if url in seen:
                continue
            seen.add(url)
            is_default = url in defaults
            repo = ref.path if is_default else self.rewrite(mirror, ref.path)
            cfg = self.host_config(urlsplit(url).netloc)
            auth = cfg.auth or (request_auth if urlsplit(url).netloc == ref.domain else None)
            out.append(Endpoint(url, repo, cfg.tls, auth, is_default))
        for url in defaults:
            if url in seen:
                continue
            seen.add(url)
            cfg = self.host_config(urlsplit(url).netloc if ref.domain != DEFAULT_DOMAIN else ref.domain)
            out.append(Endpoint(url, ref.path, cfg.tls, request_auth or cfg.auth, True))
        return out

    @staticmethod
    def rewrite(mirror: Mirror, path: str) -> str:
        for pattern, repl in mirror.rewrites:
            if re.search(pattern, path):
                return re.sub(pattern, repl, path, count=1)
        return path
