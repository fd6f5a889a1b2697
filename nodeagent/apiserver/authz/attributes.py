"""What a request asks to do (authorizer.Attributes) and what an authorizer answers."""

from __future__ import annotations

import dataclasses
import enum

from nodeagent.apiserver.auth import User as Subject  # user.Info: the authenticated or impersonated user

AUTHENTICATED_GROUP = "system:authenticated"
UNAUTHENTICATED_GROUP = "system:unauthenticated"
MASTERS_GROUP = "system:masters"
ANONYMOUS_USER = "system:anonymous"
__all__ = ["Subject", "Attributes", "Decision", "forbidden_message"]


@dataclasses.dataclass(frozen=True)
class Attributes:
    subject: Subject
    verb: str
    resource_request: bool = True
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""  # a non-resource request's path
    field_selector: str = ""  # a list or watch's fieldSelector (the Node authorizer's single-object reads)

    @property
    def combined_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


class Decision(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"
    NO_OPINION = "no-opinion"


def forbidden_message(a: Attributes) -> str:
    """kube-apiserver's responsewriters.forbiddenMessage."""
    user = a.subject.name
    if not a.resource_request:
        return f'User "{user}" cannot {a.verb} path "{a.path}"'
    if a.namespace:
        return (
            f'User "{user}" cannot {a.verb} resource "{a.combined_resource}" in API group '
            f'"{a.api_group}" in the namespace "{a.namespace}"'
        )
    return (
        f'User "{user}" cannot {a.verb} resource "{a.combined_resource}" in API group '
        f'"{a.api_group}" at the cluster scope'
    )
