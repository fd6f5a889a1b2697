"""The kubelet's managed /etc/hosts, termination-message files and how a message is read back."""

import os
from typing import Any

from nodeagent.kubelet import pod_files

ALIASES = [{"ip": "10.1.2.3", "hostnames": ["foo.remote", "bar.remote"]},
           {"ip": "10.1.2.4", "hostnames": ["x"]}]


def test_managed_hosts_is_the_kubelets_file_byte_for_byte():
    assert pod_files.managed_hosts(["10.244.1.32"], "web-0", "", ALIASES) == (
        "# Kubernetes-managed hosts file.\n"
        "127.0.0.1\tlocalhost\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        "fe00::0\tip6-localnet\n"
        "fe00::0\tip6-mcastprefix\n"
        "fe00::1\tip6-allnodes\n"
        "fe00::2\tip6-allrouters\n"
        "10.244.1.32\tweb-0\n"
        "\n"
        "# Entries added by HostAliases.\n"
        "10.1.2.3\tfoo.remote\tbar.remote\n"
        "10.1.2.4\tx\n")


def test_subdomain_gives_the_fqdn_first_and_no_aliases_no_section():
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"hostname": "h", "subdomain": "svc"}}
    host, domain = pod_files.hostname_and_domain(pod, "cluster.local")
    assert (host, domain) == ("h", "svc.ns.svc.cluster.local")
    text = pod_files.managed_hosts(["10.0.0.5", "fd00::5"], host, domain, [])
    assert text.endswith("10.0.0.5\th.svc.ns.svc.cluster.local\th\nfd00::5\th.svc.ns.svc.cluster.local\th\n")
    assert "HostAliases" not in text


def test_host_network_pods_get_the_nodes_file(tmp_path):
    node = tmp_path / "hosts"
    node.write_text("127.0.0.1 localhost\n192.0.2.9 node1\n")
    pod = {"metadata": {"name": "p", "uid": "u"}, "spec": {"hostNetwork": True, "hostAliases": ALIASES[:1]}}
    path = pod_files.ensure_hosts_file(tmp_path / "pod", pod, [], "cluster.local", str(node))
    assert path.read_text() == ("# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n"
                                "192.0.2.9 node1\n\n# Entries added by HostAliases.\n"
                                "10.1.2.3\tfoo.remote\tbar.remote\n")
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    inode = os.stat(path).st_ino
    pod_files.ensure_hosts_file(tmp_path / "pod", pod, [], "cluster.local", str(node))
    assert os.stat(path).st_ino == inode  # rewritten in place: running containers keep seeing it


def test_a_container_mounting_etc_hosts_itself_gets_no_managed_one():
    assert pod_files.wants_hosts_mount({"volumeMounts": [{"name": "v", "mountPath": "/data"}]})
    assert not pod_files.wants_hosts_mount({"volumeMounts": [{"name": "v", "mountPath": "/etc/hosts"}]})


def test_termination_message_from_the_file_then_the_log(tmp_path):
    f = pod_files.termination_message_file(tmp_path, "c")
    assert f.parent == tmp_path / "containers" / "c" and f.read_bytes() == b""
    assert oct(os.stat(f).st_mode & 0o777) == "0o666"
    log = tmp_path / "0.log"
    log.write_text("2024-01-01T00:00:00Z stdout F line1\n2024-01-01T00:00:00Z stderr P part\n"
                   "2024-01-01T00:00:00Z stderr F ial\n")
    mounts = [("/dev/termination-log", str(f))]
    assert pod_files.termination_message(mounts, "/dev/termination-log", False, str(log)) == ""
    assert pod_files.termination_message(mounts, "/dev/termination-log", True, str(log)) == "line1\npartial\n"
    f.write_text("bye")
    assert pod_files.termination_message(mounts, "/dev/termination-log", True, str(log)) == "bye"
    f.write_bytes(b"x" * 5000)
    assert len(pod_files.termination_message(mounts, "/dev/termination-log", False, "")) == 4096


def test_fallback_keeps_the_last_80_lines_within_2_kib(tmp_path):
    log = tmp_path / "0.log"
    log.write_text("".join(f"2024-01-01T00:00:00Z stdout F l{i}\n" for i in range(200)))
    out = pod_files.termination_message([], "/dev/termination-log", True, str(log))
    assert out.splitlines() == [f"l{i}" for i in range(120, 200)]
    big = tmp_path / "1.log"
    big.write_text("".join(f"2024-01-01T00:00:00Z stdout F {'y' * 100}{i}\n" for i in range(50)))
    assert len(pod_files.termination_message([], "", True, str(big)).encode()) == 2048


def test_set_hostname_as_fqdn():
    spec: dict[str, Any] = {"subdomain": "s", "setHostnameAsFQDN": True}
    pod = {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}
    assert pod_files.kernel_hostname(pod, "cluster.local") == "p.s.ns.svc.cluster.local"
    spec["setHostnameAsFQDN"] = False
    assert pod_files.kernel_hostname(pod, "cluster.local") == "p"


def test_mount_propagation_and_recursive_read_only():
    from cri.proto import api_pb2 as pb

    cases = [({"mountPropagation": "HostToContainer"}, False, True,
              (pb.PROPAGATION_HOST_TO_CONTAINER, False)),
             ({"mountPropagation": "Bidirectional"}, False, True, (pb.PROPAGATION_BIDIRECTIONAL, False)),
             ({"recursiveReadOnly": "Enabled"}, True, False, (pb.PROPAGATION_PRIVATE, True)),
             ({"recursiveReadOnly": "IfPossible"}, True, False, (pb.PROPAGATION_PRIVATE, False)),
             ({"recursiveReadOnly": "IfPossible"}, True, True, (pb.PROPAGATION_PRIVATE, True)),
             ({}, True, True, (pb.PROPAGATION_PRIVATE, False))]
    for vm, ro, supported, want in cases:
        m = pb.Mount(readonly=ro)
        pod_files.mount_options(vm, m, supported)
        assert (m.propagation, m.recursive_read_only) == want, vm
