"""ServiceAccount user names, groups and the default issuer: what configs and authorizers need of
sa_token.py without its JWT and cryptography imports (a joined `agent` never loads those)."""

from __future__ import annotations

DEFAULT_ISSUER = "https://kubernetes.default.svc.cluster.local"
LEGACY_ISSUER = "kubernetes/serviceaccount"
USER_PREFIX = "system:serviceaccount:"
ALL_GROUP = "system:serviceaccounts"


def username(namespace: str, name: str) -> str:
    return f"{USER_PREFIX}{namespace}:{name}"


def split_username(user: str) -> tuple[str, str] | None:
    """(namespace, name) of a `system:serviceaccount:<ns>:<name>` user, else None."""
    if not user.startswith(USER_PREFIX):
        return None
    ns, _, name = user[len(USER_PREFIX):].partition(":")
    return (ns, name) if ns and name and ":" not in name else None


def groups(namespace: str) -> tuple[str, ...]:
    return ALL_GROUP, f"{ALL_GROUP}:{namespace}"
