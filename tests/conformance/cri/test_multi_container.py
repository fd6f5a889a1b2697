"""critest multi_container_linux.go: "Multiple Containers [Conformance]"."""

from pathlib import Path

import pytest

from tests.conformance.cri import framework as fw


@pytest.fixture
def two(f):
    name = "PodSandbox-for-multi-container-test-" + fw.new_uuid()
    cfg = f.pod_config(log_dir=f.log_dir(name))
    cfg.metadata.name = name
    cfg.port_mappings.add(container_port=80)
    sid = f.run_pod(cfg)
    httpd = f.container_config("httpd", image=fw.HTTPD)
    httpd.log_path = httpd.metadata.name + ".log"
    h = f.create(sid, cfg, httpd)
    f.start_running(h)
    bb = f.container_config("busybox", command=["sh", "-c", f"echo {fw.DEFAULT_LOG}; sleep 1000"])
    bb.log_path = bb.metadata.name + ".log"
    b = f.create(sid, cfg, bb)
    f.start_running(b)
    return sid, h, b


def test_should_support_network(f, two):
    ip = f.pod_status(two[0]).network.ip
    assert fw.http_get(f"http://{ip}:80/") == 200


def test_should_support_container_log(f, two):
    _, h, b = two
    for cid, want in ((h, "httpd -D FOREGROUND"), (b, fw.DEFAULT_LOG)):
        path = Path(f.status(cid).log_path)

        def logged(path: Path = path, want: str = want) -> bool:
            return path.exists() and want in path.read_text()

        assert fw.eventually(logged, bool, 60, 0.1)


def test_should_support_container_exec(f, two):
    _, h, b = two
    assert f.exec_ok(h, ["echo", "httpd"]) == "httpd\n"
    assert f.exec_ok(b, ["echo", "busybox"]) == "busybox\n"
