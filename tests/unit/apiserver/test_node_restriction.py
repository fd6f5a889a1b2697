"""NodeRestriction's checks of a node's writes: labels outside the kubelet's own are refused on its Node,
mirror pods refer to nothing of the API's; others' writes are not its business."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.apiserver.authz.attributes import Subject
from nodeagent.apiserver.authz.escalation import REQUESTER
from nodeagent.apiserver.authz.node_restriction import check, forbidden_label
from nodeagent.apiserver.errors import ApiError

NODE = Subject("system:node:a", ("system:nodes", "system:authenticated"))
ADMIN = Subject("admin", ("system:masters", "system:authenticated"))


def node(**labels: str) -> dict:
    return {"metadata": {"name": "a", "labels": labels}}


def test_the_kubelet_s_labels_are_its_own():
    for ok in ("kubernetes.io/hostname", "kubernetes.io/arch", "topology.kubernetes.io/zone",
               "node.kubernetes.io/exclude-from-external-load-balancers", "kubelet.kubernetes.io/x",
               "foo.node.kubernetes.io/y", "example.com/rack", "plain"):
        assert not forbidden_label(ok), ok
    for bad in ("node-role.kubernetes.io/control-plane", "node-restriction.kubernetes.io/pool",
                "x.node-restriction.kubernetes.io/y", "k8s.io/z", "team.k8s.io/z", "kubernetes.io/other"):
        assert forbidden_label(bad), bad


async def test_a_node_may_not_give_itself_a_role_label():
    token = REQUESTER.set(NODE)
    try:
        await check("nodes", "", node(**{"kubernetes.io/hostname": "a", "rack": "3"}), None)
        with pytest.raises(ApiError) as e:
            await check("nodes", "", node(**{"node-role.kubernetes.io/control-plane": ""}), None)
        assert e.value.code == 403
        assert e.value.message == ('nodes "a" is forbidden: node "a" is not allowed to set the following '
                                   "labels: node-role.kubernetes.io/control-plane")
        old = node(**{"node-role.kubernetes.io/control-plane": "", "kubernetes.io/hostname": "a"})
        await check("nodes", "", node(**{"node-role.kubernetes.io/control-plane": "",
                                         "kubernetes.io/hostname": "b"}), old)  # kept as an admin set it
        with pytest.raises(ApiError) as e:
            await check("nodes", "", node(**{"kubernetes.io/hostname": "a"}), old)  # removing it is modifying
        assert e.value.message == ('nodes "a" is forbidden: is not allowed to modify labels: '
                                   "node-role.kubernetes.io/control-plane")
    finally:
        REQUESTER.reset(token)
    token = REQUESTER.set(ADMIN)
    try:
        await check("nodes", "", node(**{"node-role.kubernetes.io/control-plane": ""}), None)
    finally:
        REQUESTER.reset(token)


async def test_a_mirror_pod_refers_to_nothing_of_the_api_s():
    def mirror(**spec) -> dict:
        return {"metadata": {"name": "web-a", "annotations": {"kubernetes.io/config.mirror": "x"}},
                "spec": {"nodeName": "a", "containers": [{"name": "c", "image": "i"}], **spec}}

    token = REQUESTER.set(NODE)
    try:
        await check("pods", "", mirror(), None)
        # the defaulted account, as this apiserver fills it in
        await check("pods", "", mirror(serviceAccountName="default", serviceAccount="default"), None)
        cases: dict[str, dict[str, Any]] = {
                 "reference secrets": {"volumes": [{"name": "v", "secret": {"secretName": "s"}}]},
                 "reference configmaps": {"volumes": [{"name": "v", "configMap": {"name": "c"}}]},
                 "reference persistentvolumeclaims": {
                     "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "c"}}]},
                 "use service accounts": {"serviceAccountName": "robot"}}
        for why, spec in cases.items():
            with pytest.raises(ApiError) as e:
                await check("pods", "", mirror(**spec), None)
            assert e.value.message == f'pods "web-a" is forbidden: node "a" can not create pods that {why}'
    finally:
        REQUESTER.reset(token)


async def test_a_volume_a_node_creates_is_pinned_to_it():
    def pv(node: str) -> dict:
        return {"metadata": {"name": "pv-1"}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}}

    token = REQUESTER.set(NODE)
    try:
        await check("persistentvolumes", "", pv("a"), None)
        await check("persistentvolumes", "", pv("b"), pv("b"))  # an update: the authorizer's business
        for other in (pv("b"), {"metadata": {"name": "pv-1"}, "spec": {"hostPath": {"path": "/"}}}):
            with pytest.raises(ApiError) as e:
                await check("persistentvolumes", "", other, None)
            assert "may only write persistentvolumes whose nodeAffinity pins them to it" in e.value.message
    finally:
        REQUESTER.reset(token)


def test_a_node_creates_a_mirror_pod_whatever_its_annotation_value():
    from nodeagent.apiserver.auth import node_may

    def pod(annotations: dict) -> dict:
        return {"metadata": {"name": "web-a", "annotations": annotations}, "spec": {"nodeName": "a"}}

    mirror = "kubernetes.io/config.mirror"
    assert node_may("a", "create", "pods", "", "default", "", pod({mirror: ""})) is None
    assert node_may("a", "create", "pods", "", "default", "", pod({mirror: "h"})) is None
    assert node_may("a", "create", "pods", "", "default", "", pod({})) is not None
