"""Registry credentials from a pod's imagePullSecrets, matched to an image as kubelet's keyring does
(pkg/credentialprovider: keyring.go, config.go, secrets/secrets.go).

A `kubernetes.io/dockerconfigjson` Secret holds `{"auths": {<registry>: {...}}}` under `.dockerconfigjson`,
a `kubernetes.io/dockercfg` Secret the bare map under `.dockercfg`. Each registry key (scheme, `/v1/` and
`/v2/` dropped) matches an image whose host has the same number of dot-separated parts, each matching
its glob (`*.example.com`), the same port, and a path the key's path is a prefix of; the most specific keys
(reverse-sorted) come first. `index.docker.io` credentials also serve Docker Hub images named without
a registry or as `docker.io/...`. The kubelet tries each matching credential in turn.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import fnmatch
import json
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

DOCKER_CONFIG_JSON = "kubernetes.io/dockerconfigjson"
DOCKER_CONFIG_JSON_KEY = ".dockerconfigjson"
DOCKERCFG = "kubernetes.io/dockercfg"
DOCKERCFG_KEY = ".dockercfg"
DEFAULT_REGISTRY_HOST = "index.docker.io"


class KeyringError(ValueError):
    """A pull secret's contents cannot be read (kubelet fails the pull with this message)."""


@dataclasses.dataclass(frozen=True)
class Credential:
    """One registry login, as CRI's AuthConfig carries it."""

    username: str = ""
    password: str = ""
    auth: str = ""
    server_address: str = ""
    identity_token: str = ""
    registry_token: str = ""


def _entry(server: str, e: Mapping[str, Any]) -> Credential:
    """DockerConfigEntry: `auth` (base64 user:password) wins over username/password, as its UnmarshalJSON."""
    if not isinstance(e, Mapping):
        raise KeyringError(f"registry entry {server!r} is not an object")
    user, password = str(e.get("username") or ""), str(e.get("password") or "")
    if e.get("auth"):
        try:
            user, sep, password = base64.b64decode(str(e["auth"]), validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            sep = ""
        if not sep:
            raise KeyringError("unable to parse auth field, must be formatted as base64(username:password)")
    return Credential(username=user, password=password, server_address=server,
                      identity_token=str(e.get("identitytoken") or ""),
                      registry_token=str(e.get("registrytoken") or ""))


def docker_config(secret: Mapping[str, Any]) -> dict[str, Credential]:
    """The registry → credential map of one pull Secret; {} for a Secret of another type."""
    typ = secret.get("type")
    data = secret.get("data") or {}
    if typ == DOCKER_CONFIG_JSON and data.get(DOCKER_CONFIG_JSON_KEY):
        doc = _decode(data[DOCKER_CONFIG_JSON_KEY])
        auths = doc.get("auths") if isinstance(doc, dict) else None
        entries = auths if isinstance(auths, dict) else {}
    elif typ == DOCKERCFG and data.get(DOCKERCFG_KEY):
        doc = _decode(data[DOCKERCFG_KEY])
        entries = doc if isinstance(doc, dict) else {}
    else:
        return {}
    return {str(server): _entry(str(server), e) for server, e in entries.items()}


def _decode(b64: str) -> Any:
    try:
        return json.loads(base64.b64decode(b64))
    except (binascii.Error, ValueError) as e:
        raise KeyringError(f"invalid docker config: {e}") from None


def _key(location: str) -> str:
    """The keyring's index key: the location without scheme; `/v1/` and `/v2/` mean the host itself."""
    value = location if location.startswith(("http://", "https://")) else "https://" + location
    parts = urlsplit(value)
    path = parts.path
    if path.startswith(("/v1/", "/v2/")):
        path = path[3:]
    return parts.netloc + path if path and path != "/" else parts.netloc


def _split(url: str) -> tuple[list[str], str, str]:
    """(host parts, port, path) of a schemeless URL."""
    parts = urlsplit("https://" + url)
    host, port = parts.netloc, ""
    if host.startswith("["):
        end = host.find("]")
        host, port = host[:end + 1], host[end + 2:] if host[end + 1:end + 2] == ":" else ""
    elif host.count(":") == 1:
        host, port = host.split(":")
    return host.split("."), port, parts.path


def urls_match(glob: str, target: str) -> bool:
    """URLsMatchStr: glob host parts, equal ports, the glob's path a prefix of the target's."""
    g_parts, g_port, g_path = _split(glob)
    t_parts, t_port, t_path = _split(target)
    if g_port != t_port or len(g_parts) != len(t_parts) or not t_path.startswith(g_path):
        return False
    return all(fnmatch.fnmatchcase(t, g) for g, t in zip(g_parts, t_parts, strict=True))


def is_default_registry_match(image: str) -> bool:
    first, sep, _ = image.partition("/")
    if not first:
        return False
    if not sep:
        return True
    return first in ("docker.io", "index.docker.io") or not any(c in first for c in ".:")


class Keyring:
    """BasicDockerKeyring over the pod's pull Secrets."""

    def __init__(self, configs: Iterable[Mapping[str, Credential]] = ()) -> None:
        self.creds: dict[str, list[Credential]] = {}
        for cfg in configs:
            for location, cred in cfg.items():
                self.creds.setdefault(_key(location), []).append(cred)
        self.index = sorted(self.creds, reverse=True)

    def lookup(self, repository: str) -> list[Credential]:
        """Every credential whose key matches the image's repository (`host[:port]/path`, no tag)."""
        out = [c for k in self.index if urls_match(k, repository) for c in self.creds[k]]
        if not out and is_default_registry_match(repository):
            out = list(self.creds.get(DEFAULT_REGISTRY_HOST, ()))
        return out


def repository(image: str) -> str:
    """The image's normalised repository, as parsers.ParseImageName gives it: `docker.io/library/x` for `x`,
    tag and digest dropped."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[:name.rfind(":")]
    first, sep, rest = name.partition("/")
    if sep and (any(c in first for c in ".:") or first == "localhost"):
        domain, path = first, rest
    else:
        domain, path = "docker.io", name
    if domain in ("docker.io", "index.docker.io"):
        domain = "docker.io"
        if "/" not in path:
            path = "library/" + path
    return f"{domain}/{path}"


def credentials_for(image: str, secrets: Iterable[Mapping[str, Any]]) -> list[Credential]:
    """The credentials to try for `image`, in kubelet's order; [] means pull anonymously."""
    return Keyring(docker_config(s) for s in secrets).lookup(repository(image))
