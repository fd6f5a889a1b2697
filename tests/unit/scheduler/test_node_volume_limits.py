"""NodeVolumeLimits: a node's CSINode allocatable count caps the CSI volumes of a driver on it."""

from __future__ import annotations

from typing import Any

from nodeagent.scheduler.framework import CycleState
from nodeagent.scheduler.framework.status import Code
from nodeagent.scheduler.plugins import nodevolumelimits
from tests.unit.scheduler.test_volume_plugins import FakeVolumes, claim, node, pod, setup

DRIVER = "hostpath.csi.nodeagent.io"


class WithCSINodes(FakeVolumes):
    def __init__(self, base: FakeVolumes, csinodes: dict[str, dict[str, Any]]) -> None:
        self.__dict__.update(base.__dict__)
        self.csinodes = csinodes

    def csinode(self, name: str) -> dict[str, Any] | None:
        return self.csinodes.get(name)


def csi_pv(name: str, handle: str) -> dict:
    return {"metadata": {"name": name}, "spec": {"csi": {"driver": DRIVER, "volumeHandle": handle}}}


def test_csi_volumes_beyond_the_nodes_count_do_not_fit():
    n1 = node("n1")
    base, handle = setup([n1])
    api = WithCSINodes(base, {"n1": {"spec": {"drivers": [{"name": DRIVER, "nodeID": "n1",
                                                          "allocatable": {"count": 2}}]}}})
    handle.api.volumes = api
    api.classes["csi-hostpath"] = {"metadata": {"name": "csi-hostpath"}, "provisioner": DRIVER,
                                   "volumeBindingMode": "WaitForFirstConsumer"}
    for i in (1, 2, 3):
        api.claims[("default", f"c{i}")] = claim(f"c{i}", cls="csi-hostpath", volume=f"pv{i}")
        api.pvs[f"pv{i}"] = csi_pv(f"pv{i}", f"h{i}")
    api.claims[("default", "new")] = claim("new", cls="csi-hostpath")  # unbound: counted by its class
    on_node = pod("holder", "c1", "c2", node_name="n1")
    n1.pods[on_node.uid] = on_node
    nvl = nodevolumelimits.new(None, handle)

    state = CycleState()
    p = pod("p", "c3")
    nvl.pre_filter(state, p)
    st = nvl.filter(state, p, n1)
    assert st is not None and st.code == Code.UNSCHEDULABLE
    assert st.reasons == ("node(s) exceed max volume count",)

    state = CycleState()
    p = pod("p2", "c1")  # a volume the node already has counts once
    nvl.pre_filter(state, p)
    assert nvl.filter(state, p, n1) is None

    state = CycleState()
    p = pod("p3", "new")
    nvl.pre_filter(state, p)
    assert nvl.filter(state, p, n1) is not None
    api.csinodes.clear()  # no CSINode: no limit
    assert nvl.filter(state, p, n1) is None


def test_pods_without_csi_volumes_are_skipped():
    _, handle = setup()
    _, st = nodevolumelimits.new(None, handle).pre_filter(CycleState(), pod("p"))
    assert st is not None and st.code == Code.SKIP
