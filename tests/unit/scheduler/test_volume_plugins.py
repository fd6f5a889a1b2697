"""VolumeBinding, VolumeRestrictions and VolumeZone over an in-memory VolumeAPI: the reasons kube-scheduler
prints, per-node matching of WaitForFirstConsumer claims, Reserve's assumptions and PreBind's writes."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Mapping
from typing import Any

from nodeagent.scheduler.framework import CycleState, NodeInfo, PodInfo
from nodeagent.scheduler.framework.status import Code
from nodeagent.scheduler.plugins import volumebinding, volumerestrictions, volumezone


class FakeVolumes:
    """The VolumeAPI: claims, volumes and classes in dicts; writes recorded (and applied)."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}
        self.pvs: dict[str, dict[str, Any]] = {}
        self.classes: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str, str]] = []

    def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.claims.get((namespace, name))

    def volumes(self) -> list[dict[str, Any]]:
        return list(self.pvs.values())

    def storage_class(self, name: str) -> dict[str, Any] | None:
        return self.classes.get(name)

    def csinode(self, name: str) -> dict[str, Any] | None:
        return None

    async def bind_volume(self, volume: dict[str, Any], claim: Mapping[str, Any]) -> None:
        self.writes.append(("bind", volume["metadata"]["name"], claim["metadata"]["name"]))
        c = self.claims[("default", claim["metadata"]["name"])]  # the PV controller finishes the bind
        c["spec"]["volumeName"] = volume["metadata"]["name"]
        c["status"] = {"phase": "Bound"}

    async def select_node(self, claim: Mapping[str, Any], node_name: str) -> None:
        self.writes.append(("select", claim["metadata"]["name"], node_name))
        c = self.claims[("default", claim["metadata"]["name"])]  # the provisioner makes a volume there
        c["spec"]["volumeName"] = "pvc-new"
        c["status"] = {"phase": "Bound"}


def node(name: str, **labels: str) -> NodeInfo:
    return NodeInfo({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
                     "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}})


def pod(name: str, *claims: str, node_name: str = "") -> PodInfo:
    return PodInfo({"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
                    "spec": {"nodeName": node_name, "containers": [{"name": "c"}],
                             "volumes": [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}}
                                         for i, c in enumerate(claims)]}})


def claim(name: str, cls: str = "", volume: str = "", modes=("ReadWriteOnce",), size: str = "1Gi") -> dict:
    spec: dict[str, Any] = {"accessModes": list(modes), "storageClassName": cls,
                            "resources": {"requests": {"storage": size}}}
    if volume:
        spec["volumeName"] = volume
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}, "spec": spec,
            "status": {"phase": "Bound" if volume else "Pending"}}


def local_pv(name: str, on: str, cls: str = "local", size: str = "1Gi", **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}, "status": {"phase": "Available"},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"], "storageClassName": cls,
                     "local": {"path": f"/mnt/{name}"}, "nodeAffinity": {"required": {"nodeSelectorTerms": [
                         {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                                "values": [on]}]}]}}}}


def setup(nodes: list[NodeInfo] | None = None) -> tuple[FakeVolumes, Any]:
    api = FakeVolumes()
    api.classes["local"] = {"metadata": {"name": "local"}, "provisioner": "kubernetes.io/no-provisioner",
                            "volumeBindingMode": "WaitForFirstConsumer"}
    api.classes["local-path"] = {"metadata": {"name": "local-path"}, "provisioner": "rancher.io/local-path",
                                 "volumeBindingMode": "WaitForFirstConsumer"}
    api.classes["fast"] = {"metadata": {"name": "fast"}, "provisioner": "x", "volumeBindingMode": "Immediate"}
    handle = types.SimpleNamespace(api=types.SimpleNamespace(volumes=api),
                                   snapshot=types.SimpleNamespace(nodes=nodes or []))
    return api, handle


def test_pods_without_claims_are_skipped():
    _, handle = setup()
    _, st = volumebinding.new(None, handle).pre_filter(CycleState(), pod("p"))
    assert st is not None and st.code == Code.SKIP


def test_missing_claim_and_unbound_immediate_claim_are_unresolvable():
    api, handle = setup()
    vb = volumebinding.new(None, handle)
    _, st = vb.pre_filter(CycleState(), pod("p", "nope"))
    assert st is not None and st.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert st.reasons == ('persistentvolumeclaim "nope" not found',)
    api.claims[("default", "imm")] = claim("imm", cls="fast")
    _, st = vb.pre_filter(CycleState(), pod("p", "imm"))
    assert st is not None and st.reasons == ("pod has unbound immediate PersistentVolumeClaims",)


def test_static_local_volume_decides_the_node_and_prebind_binds_it():
    api, handle = setup()
    api.claims[("default", "data")] = claim("data", cls="local")
    api.pvs["pv-n2"] = local_pv("pv-n2", "n2")
    vb = volumebinding.new(None, handle)
    state = CycleState()
    p = pod("p", "data")
    _, st = vb.pre_filter(state, p)
    assert st is None
    n1, n2 = node("n1"), node("n2")
    rejected = vb.filter(state, p, n1)
    assert rejected is not None
    assert rejected.reasons == ("node(s) didn't find available persistent volumes to bind",)
    assert vb.filter(state, p, n2) is None
    assert vb.reserve(state, p, "n2") is None
    assert vb.assumed == {"pv-n2": "default/data"}
    # another pod's claim cannot take the assumed volume
    api.claims[("default", "other")] = claim("other", cls="local")
    s2 = CycleState()
    vb.pre_filter(s2, pod("q", "other"))
    assert vb.filter(s2, pod("q", "other"), n2) is not None
    assert asyncio.run(vb.pre_bind(state, p, "n2")) is None
    assert api.writes == [("bind", "pv-n2", "data")]
    assert vb.assumed == {}


def test_dynamic_class_selects_the_node():
    api, handle = setup()
    api.claims[("default", "dyn")] = claim("dyn", cls="local-path")
    vb = volumebinding.new(None, handle)
    state = CycleState()
    p = pod("p", "dyn")
    vb.pre_filter(state, p)
    assert vb.filter(state, p, node("n1")) is None
    vb.reserve(state, p, "n1")
    assert asyncio.run(vb.pre_bind(state, p, "n1")) is None
    assert api.writes == [("select", "dyn", "n1")]


def test_bound_volume_with_node_affinity_conflict():
    api, handle = setup()
    api.claims[("default", "b")] = claim("b", cls="local", volume="pv-n2")
    api.pvs["pv-n2"] = local_pv("pv-n2", "n2")
    vb = volumebinding.new(None, handle)
    state = CycleState()
    p = pod("p", "b")
    vb.pre_filter(state, p)
    st = vb.filter(state, p, node("n1"))
    assert st is not None and st.reasons == ("node(s) had volume node affinity conflict",)
    assert vb.filter(state, p, node("n2")) is None


class NoProvisioner(FakeVolumes):
    """Selecting a node makes no volume: the claim never binds."""

    async def select_node(self, claim: Mapping[str, Any], node_name: str) -> None:
        self.writes.append(("select", claim["metadata"]["name"], node_name))


def test_prebind_times_out_when_the_claim_never_binds():
    _, handle = setup()
    api = NoProvisioner()
    api.classes["local-path"] = {"metadata": {"name": "local-path"}, "provisioner": "rancher.io/local-path",
                                 "volumeBindingMode": "WaitForFirstConsumer"}
    api.claims[("default", "dyn")] = claim("dyn", cls="local-path")
    handle.api.volumes = api
    vb = volumebinding.new(volumebinding.Args(bind_timeout_seconds=0), handle)
    state = CycleState()
    p = pod("p", "dyn")
    vb.pre_filter(state, p)
    vb.filter(state, p, node("n1"))
    vb.reserve(state, p, "n1")
    st = asyncio.run(vb.pre_bind(state, p, "n1"))
    assert st is not None and st.code == Code.ERROR and "deadline" in st.message


def test_read_write_once_pod_claim_serves_one_pod():
    n1 = node("n1")
    api, handle = setup([n1])
    api.claims[("default", "solo")] = claim("solo", volume="pv1", modes=("ReadWriteOncePod",))
    vr = volumerestrictions.new(None, handle)
    _, st = vr.pre_filter(CycleState(), pod("first", "solo"))
    assert st is not None and st.code == Code.SKIP  # nobody uses it yet
    user = pod("first", "solo", node_name="n1")
    n1.pods[user.uid] = user
    _, st = vr.pre_filter(CycleState(), pod("second", "solo"))
    assert st is not None and st.code == Code.UNSCHEDULABLE
    assert st.reasons == (volumerestrictions.ERR_RWOP,)


def test_volume_zone():
    api, handle = setup()
    api.claims[("default", "z")] = claim("z", volume="pv-z")
    api.pvs["pv-z"] = {"metadata": {"name": "pv-z", "labels": {"topology.kubernetes.io/zone": "a__b"}},
                       "spec": {}}
    vz = volumezone.new(None, handle)
    state = CycleState()
    p = pod("p", "z")
    vz.pre_filter(state, p)
    assert vz.filter(state, p, node("n1", **{"topology.kubernetes.io/zone": "b"})) is None
    st = vz.filter(state, p, node("n2", **{"topology.kubernetes.io/zone": "c"}))
    assert st is not None and st.reasons == ("node(s) had no available volume zone",)
