"""critest networking.go: "Networking" (bridge + portmap CNI plugins from Debian for both runtimes)."""

from cri.proto import api_pb2 as pb
from tests.conformance.cri import framework as fw


def test_runtime_should_support_dns_config(f):
    cfg = f.pod_config("create-PodSandbox-with-DNS-config")
    cfg.dns_config.servers.append(fw.DNS_SERVER)
    cfg.dns_config.searches.append(fw.DNS_SEARCH)
    cfg.dns_config.options.append(fw.DNS_OPTION)
    sid = f.run_pod(cfg)
    cid = f.create_default(sid, cfg, "container-for-DNS-config-test-")
    f.start(cid)
    out = f.exec_ok(cid, ["cat", "/etc/resolv.conf"])
    for line in ("nameserver " + fw.DNS_SERVER, "search " + fw.DNS_SEARCH, "options " + fw.DNS_OPTION):
        assert line in out


def test_runtime_should_support_set_hostname(f):
    cfg = f.pod_config("create-PodSandbox-with-hostname")
    cfg.hostname = "test-hostname"
    sid = f.run_pod(cfg)
    cid = f.create_default(sid, cfg, "container-for-hostname-test-")
    f.start(cid)
    assert f.exec_ok(cid, ["hostname"]).strip().lower() == "test-hostname"


def web_pod(f, host_port=0):
    cfg = f.pod_config("create-PodSandbox-with-port-mapping")
    cfg.port_mappings.add(container_port=fw.WEB_PORT, host_port=host_port, protocol=pb.TCP)
    sid = f.run_pod(cfg)
    cid = f.create(sid, cfg, f.container_config("container-for-web-", image=fw.WEBSERVER))
    f.start(cid)
    return sid, cfg


def test_runtime_should_support_port_mapping_with_only_container_port(f):
    sid, _ = web_pod(f)
    ip = f.pod_status(sid).network.ip
    assert ip, "The IP should not be empty"
    assert fw.http_get(f"http://{ip}:{fw.WEB_PORT}/") == 200


def test_runtime_should_support_port_mapping_with_host_port_and_container_port(f):
    web_pod(f, fw.HOST_PORT_FOR_PORT_MAPPING)
    assert fw.http_get(f"http://127.0.0.1:{fw.HOST_PORT_FOR_PORT_MAPPING}/") == 200
