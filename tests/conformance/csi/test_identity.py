"""sanity identity.go: "Identity Service"."""

from google.protobuf import wrappers_pb2

from csi.proto import csi_pb2 as pb

Service = pb.PluginCapability.Service


def test_getplugincapabilities_should_return_appropriate_capabilities(r):
    res = r.identity.GetPluginCapabilities(pb.GetPluginCapabilitiesRequest())
    for cap in res.capabilities:
        kind = cap.WhichOneof("type")
        assert kind in ("service", "volume_expansion"), cap
        if kind == "service":
            assert cap.service.type in (Service.CONTROLLER_SERVICE, Service.VOLUME_ACCESSIBILITY_CONSTRAINTS,
                                        Service.GROUP_CONTROLLER_SERVICE, Service.SNAPSHOT_METADATA_SERVICE)
    # what this driver advertises (the rest of the suite relies on it)
    assert {c.service.type for c in res.capabilities} == {Service.CONTROLLER_SERVICE,
                                                          Service.VOLUME_ACCESSIBILITY_CONSTRAINTS}


def test_probe_should_return_appropriate_information(r):
    res = r.identity.Probe(pb.ProbeRequest())
    assert isinstance(res.ready, wrappers_pb2.BoolValue)
    assert res.ready.value is True


def test_getplugininfo_should_return_appropriate_information(r):
    res = r.identity.GetPluginInfo(pb.GetPluginInfoRequest())
    assert res.name == "hostpath.csi.nodeagent.io"
    assert res.vendor_version
