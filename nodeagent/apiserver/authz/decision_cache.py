"""RBAC decisions remembered per request shape, forgotten wholesale when any RBAC object changes.

This is nodeagent's own: kube-apiserver's RBAC authorizer walks the subject's bindings on every request (it
caches nothing; only the webhook authorizer has a decision cache). Here the walk is a few percent of the
server's CPU per scheduled pod, and the same few identities (the scheduler, the load generator, the
controllers) ask the same questions thousands of times between two changes of the RBAC objects.

A decision depends on the subject's name and groups, the request's verb, API group, resource, subresource,
namespace and non-resource path, on the RBAC objects, and on the object's name only where a rule with
`resourceNames` matches the rest. So a decision no such rule touched is kept under a key without the name
(the bind of every pod by the scheduler is one entry, not one per pod), the others under the full key.
The owner calls `clear` whenever the RBAC index is rebuilt (a Role, ClusterRole, RoleBinding or
ClusterRoleBinding written or deleted, the aggregation controller's writes to an aggregated ClusterRole
included); the size is bounded, the oldest entry going first.
"""

from __future__ import annotations

from nodeagent.apiserver.authz.attributes import Attributes, Decision

Key = tuple[str, tuple[str, ...], str, bool, str, str, str, str, str, str]
Answer = tuple[Decision, str]
DEFAULT_SIZE = 4096
ANY_NAME = "\x00any"  # not a valid object name: the key of a decision that holds for every name


def key(a: Attributes, name: str) -> Key:
    s = a.subject
    return (s.name, s.groups, a.verb, a.resource_request, a.api_group, a.resource, a.subresource, a.namespace,
            name, a.path)


class DecisionCache:
    """Bounded answers by request shape; `generation` counts the times it was forgotten (tests, metrics)."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self.size = size
        self.generation = 0
        self._answers: dict[Key, Answer] = {}

    def __len__(self) -> int:
        return len(self._answers)

    def get(self, a: Attributes) -> Answer | None:
        got = self._answers.get(key(a, ANY_NAME))
        if got is None:
            got = self._answers.get(key(a, a.name))
        return got

    def put(self, a: Attributes, answer: Answer, name_matters: bool) -> None:
        if len(self._answers) >= self.size:
            del self._answers[next(iter(self._answers))]
        self._answers[key(a, a.name if name_matters else ANY_NAME)] = answer

    def clear(self) -> None:
        self._answers.clear()
        self.generation += 1
