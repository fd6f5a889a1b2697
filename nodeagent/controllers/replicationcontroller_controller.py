"""The ReplicationController controller (kube-controller-manager's replication manager).

Upstream runs the ReplicaSet controller over ReplicationControllers converted to ReplicaSets; so does
this: the same loop, reading each ReplicationController with its equality-based `spec.selector` (a plain
label map) as a ReplicaSet's `matchLabels`, writing pods owned by the ReplicationController and its status
(replicas, fullyLabeledReplicas, readyReplicas, availableReplicas, observedGeneration) back to it.
"""

from __future__ import annotations

import copy

from nodeagent.api.objects import Obj
from nodeagent.controllers.replicaset_controller import ReplicaSetController


class ReplicationControllerController(ReplicaSetController):
    name = "replicationcontroller"
    service_account = "replication-controller"
    workers = 2
    resource = "replicationcontrollers"
    kind = "ReplicationController"

    def view(self, obj: Obj) -> Obj:
        out = copy.copy(obj)
        spec = dict(obj.get("spec") or {})
        selector = spec.get("selector")
        if not isinstance(selector, dict) or not selector:
            selector = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
        spec["selector"] = {"matchLabels": dict(selector)}
        out["spec"] = spec
        out.setdefault("apiVersion", "v1")
        out.setdefault("kind", "ReplicationController")
        return out
