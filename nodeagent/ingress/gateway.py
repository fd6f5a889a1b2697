"""Gateway API (gateway.networking.k8s.io/v1): GatewayClasses of our controller, their Gateways' HTTP
listeners and the HTTPRoutes attached to them, as routes and backends of the same desired model the
Ingresses make, and the status conditions the spec asks for. Pure: objects in, routes and statuses out."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from nodeagent.client.rest import Client
from nodeagent.ingress.model import Backend, Problem, Route

GROUP = "gateway.networking.k8s.io"
VERSION = "v1"
CONTROLLER_NAME = "nodeagent.io/gateway-controller"
CLASS_NAME = "nodeagent"
RESOURCES = {"gatewayclasses": f"{GROUP}/{VERSION}/gatewayclasses", "gateways": f"{GROUP}/{VERSION}/gateways",
             "httproutes": f"{GROUP}/{VERSION}/httproutes",
             "referencegrants": f"{GROUP}/v1beta1/referencegrants", "namespaces": "namespaces"}
KIND_INFORMER = {"GatewayClass": "gatewayclasses", "Gateway": "gateways", "HTTPRoute": "httproutes"}

Obj = dict[str, Any]
StatusKey = tuple[str, str]  # (namespace, name)


@dataclasses.dataclass
class Result:
    routes: list[Route] = dataclasses.field(default_factory=list)
    backends: dict[str, Backend] = dataclasses.field(default_factory=dict)
    problems: list[Problem] = dataclasses.field(default_factory=list)
    _statuses: list[tuple[str, StatusKey, Any]] = dataclasses.field(default_factory=list)

    def statuses(self, addresses: Sequence[str]) -> Iterable[tuple[str, StatusKey, dict[str, Any]]]:
        """(informer kind, key, desired status) for every object we own the status of."""
        for kind, key, fn in self._statuses:
            yield kind, key, fn(addresses)


def status_equal(have: dict[str, Any], want: dict[str, Any]) -> bool:
    return _strip_times(have) == _strip_times(want)


def _strip_times(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _strip_times(v) for k, v in o.items() if k != "lastTransitionTime"}
    if isinstance(o, list):
        return [_strip_times(v) for v in o]
    return o


def build(classes: Iterable[Obj], gateways: Iterable[Obj], routes: Iterable[Obj], grants: Iterable[Obj],
          namespaces: Iterable[Obj], services: Iterable[Obj], slices: Iterable[Obj]) -> Result:
    return Result()


async def ensure_class(client: Client) -> None:
    return None
