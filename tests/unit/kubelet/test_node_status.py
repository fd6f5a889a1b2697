import os
from pathlib import Path

from nodeagent.kubelet.node_status import (
    go_arch,
    machine_capacity,
    node_addresses,
    node_info,
    node_labels,
    node_taints,
    ready_condition,
    runtime_errors,
)

NOW = 1_700_000_000.0


def test_machine_capacity(tmp_path: Path):
    cap = machine_capacity(tmp_path)
    assert int(cap["cpu"]) == os.cpu_count()
    assert cap["memory"].endswith("Ki") and int(cap["memory"][:-2]) > 0
    assert cap["pods"] == "110"
    st = os.statvfs(tmp_path)
    assert cap["ephemeral-storage"] == f"{st.f_blocks * st.f_frsize // 1024}Ki"


def test_node_info_from_fixture_files(tmp_path: Path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/machine-id").write_text("abc123\n")
    (tmp_path / "etc/os-release").write_text('NAME="Debian"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n')
    (tmp_path / "proc/sys/kernel/random").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    info = node_info("containerd", "1.6.20", "v1.32.0", etc=tmp_path / "etc", proc=tmp_path / "proc",
                     sys_dir=tmp_path / "sys")
    assert info["machineID"] == "abc123" and info["bootID"] == "boot-1" and info["systemUUID"] == ""
    assert info["osImage"] == "Debian GNU/Linux 12 (bookworm)"
    assert info["containerRuntimeVersion"] == "containerd://1.6.20"
    assert info["kernelVersion"] == os.uname().release and info["operatingSystem"] == "linux"
    assert go_arch("x86_64") == "amd64" and go_arch("aarch64") == "arm64"


def test_labels_and_addresses():
    labels = node_labels("Node1", extra={"role": "lab"})
    assert labels["kubernetes.io/hostname"] == "node1" and labels["kubernetes.io/os"] == "linux"
    assert labels["role"] == "lab"
    assert node_addresses("node1", ["10.0.0.5"]) == [{"type": "InternalIP", "address": "10.0.0.5"},
                                                      {"type": "Hostname", "address": "node1"}]


def test_ready_condition():
    c = ready_condition([], NOW)
    assert (c["status"], c["reason"], c["message"]) == (
        "True", "KubeletReady", "kubelet is posting ready status")
    errs = runtime_errors(True, False, "NetworkPluginNotReady", "cni plugin not initialized",
                          pleg_healthy=False, pleg_message="pleg has yet to be successful")
    c2 = ready_condition(errs, NOW + 10, old=c)
    assert c2["status"] == "False" and c2["reason"] == "KubeletNotReady"
    assert c2["message"] == ("[container runtime network not ready: NetworkReady=false "
                             "reason:NetworkPluginNotReady message:cni plugin not initialized, "
                             "PLEG is not healthy: pleg has yet to be successful]")
    assert c2["lastTransitionTime"] != c["lastTransitionTime"]
    c3 = ready_condition(runtime_errors(False, True), NOW + 20, old=c2)
    assert c3["message"] == "container runtime is down"
    assert c3["lastTransitionTime"] == c2["lastTransitionTime"]
    assert c3["lastHeartbeatTime"] != c2["lastHeartbeatTime"]


def test_taints():
    existing = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    assert node_taints(existing, ready=True) == [existing[0]]
    t = node_taints(existing, ready=False, pressure_taints=[{"key": "node.kubernetes.io/disk-pressure",
                                                             "effect": "NoSchedule"}])
    assert [x["key"] for x in t] == [
        "dedicated", "node.kubernetes.io/not-ready", "node.kubernetes.io/disk-pressure"]


async def test_network_errors_hold_pods_until_the_runtime_network_is_ready(tmp_path):
    """kubelet's runtimeState.networkErrors(): asked again while not ready, kept once ready."""
    from nodeagent.kubelet.node import NodeAgent
    from nodeagent.testing.clock import FakeClock
    from nodeagent.testing.fake_cri import FakeRuntime, serve

    cri = FakeRuntime()
    cri.network_ready = False
    async with serve(cri) as client:
        node = NodeAgent(None, client, "n", str(tmp_path), lambda: (True, ""), FakeClock(),  # type: ignore[arg-type]
                         addresses=["10.0.0.1"])
        errors = await node.network_errors()
        assert errors == ["container runtime network not ready: NetworkReady=false "
                          "reason:NetworkPluginNotReady "
                          "message:Network plugin returns error: cni plugin not initialized"]
        cri.network_ready = True
        assert await node.network_errors() == []
        cri.network_ready = False  # kept until the node's next status pass reads the runtime again
        assert await node.network_errors() == []
        await node._runtime_errors()
        assert await node.network_errors() == errors


async def test_the_lease_is_renewed_every_quarter_of_its_duration(tmp_path):
    """nodeLeaseDurationSeconds (40 by default) is the Lease's leaseDurationSeconds; kubelet renews it 4 times
    within it."""
    from nodeagent.kubelet.node import NodeAgent
    from nodeagent.testing.clock import FakeClock

    class Client:
        def __init__(self) -> None:
            self.patches: list[dict] = []

        async def patch(self, resource, name, body, namespace=None):
            self.patches.append(body)

    for duration, period in ((40, 10.0), (8, 2.0)):
        client = Client()
        node = NodeAgent(client, None, "n", str(tmp_path), lambda: (True, ""), FakeClock(),  # type: ignore[arg-type]
                         addresses=["10.0.0.1"], lease_duration=duration)
        await node.renew_lease()
        assert client.patches[0]["spec"]["leaseDurationSeconds"] == duration
        assert node.lease_period == period
