"""critest runtime_info.go: "Runtime info"."""



def test_runtime_should_return_version_info(f):
    v = f.c.version("0.1.0")
    assert v.version and v.runtime_name and v.runtime_version and v.runtime_api_version


def test_runtime_should_return_runtime_conditions(f):
    st = f.c.status(verbose=False).status
    ready = {c.type for c in st.conditions if c.status}
    assert {"RuntimeReady", "NetworkReady"} <= ready, "should return all the required runtime conditions"
