"""critest runtime_info.go: "Runtime info"."""

from cri.proto import api_pb2 as pb


def test_runtime_should_return_version_info(f):
    v = f.rt.Version(pb.VersionRequest(version="0.1.0"))
    assert v.version and v.runtime_name and v.runtime_version and v.runtime_api_version


def test_runtime_should_return_runtime_conditions(f):
    st = f.rt.Status(pb.StatusRequest(verbose=False)).status
    ready = {c.type for c in st.conditions if c.status}
    assert {"RuntimeReady", "NetworkReady"} <= ready, "should return all the required runtime conditions"
