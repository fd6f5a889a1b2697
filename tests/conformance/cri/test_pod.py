"""critest pod.go and pod_linux.go: "PodSandbox"."""

import grpc
import pytest

from cri.proto import api_pb2 as pb
from tests.conformance.cri import framework as fw


def test_runtime_should_support_running_podsandbox(f):
    sid = f.run_default_pod("PodSandbox-for-create-test-")
    assert f.pod_status(sid).state == pb.SANDBOX_READY
    assert sid in [p.id for p in f.list_pods(id=sid)], "PodSandbox should be listed"


def test_runtime_should_support_stopping_podsandbox(f):
    sid = f.run_default_pod("PodSandbox-for-test-stop-")
    f.c.stop_pod_sandbox(sid)
    assert f.pod_status(sid).state == pb.SANDBOX_NOTREADY


def test_runtime_should_support_removing_podsandbox(f):
    sid = f.run_default_pod("PodSandbox-for-test-remove-")
    f.c.stop_pod_sandbox(sid)
    f.c.remove_pod_sandbox(sid)
    assert sid not in [p.id for p in f.list_pods(id=sid)], "PodSandbox should be removed"


def test_runtime_should_support_preserving_podsandbox_attributes(f):
    cfg = f.pod_config("PodSandbox-with-attributes-", labels={})
    md = cfg.metadata
    labels = {"foo": "bar", "io.kubernetes.pod.name": md.name, "io.kubernetes.pod.namespace": md.namespace,
              "io.kubernetes.pod.uid": md.uid}
    cfg.labels.update(labels)
    cfg.annotations.update({"abc": "def"})
    sid = f.run_pod(cfg)
    st = f.pod_status(sid)
    pods = f.list_pods(id=sid)
    assert len(pods) == 1
    for got in (st, pods[0]):
        assert (got.metadata.name, got.metadata.uid, got.metadata.namespace, got.metadata.attempt) == \
            (md.name, md.uid, md.namespace, md.attempt)
        assert labels.items() <= dict(got.labels).items()
        assert {"abc": "def"}.items() <= dict(got.annotations).items()


def _metrics_supported(f):
    try:
        return list(f.c.list_metric_descriptors())
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.UNIMPLEMENTED:
            pytest.skip("CRI Metrics endpoints not supported by this runtime version")
        raise


def test_runtime_should_support_returning_metrics_descriptors(f):
    descs = _metrics_supported(f)
    for d in descs:
        assert d.help and d.label_keys, d.name


def test_runtime_should_support_listing_pod_sandbox_metrics(f):
    _metrics_supported(f)
    sid, pod = f.pod_for_container()
    cid = f.create_default(sid, pod, "container-for-metrics-")
    f.start(cid)
    metrics = f.c.list_pod_sandbox_metrics()
    assert any(m.pod_sandbox_id == sid for m in metrics)


def _sysctl_pod(f, sysctls):
    cfg = f.pod_config("pod-sandbox-with-sysctls-")
    cfg.linux.sysctls.update(sysctls)
    return f.run_pod(cfg), cfg


def _check_sysctl(f, cid, path, want):
    out, _ = f.exec_sync(cid, ["cat", path])
    assert out.decode().strip() == want


def test_should_support_safe_sysctls(f):
    sid, pod = _sysctl_pod(f, {"kernel.shm_rmid_forced": "1"})
    cid = f.create_default(sid, pod, "container-shm-rmid-forced")
    f.start(cid)
    _check_sysctl(f, cid, "/proc/sys/kernel/shm_rmid_forced", "1")


def test_should_support_unsafe_sysctls(f):
    sid, pod = _sysctl_pod(f, {"fs.mqueue.msg_max": "100"})
    cid = f.create_default(sid, pod, "container-fs-mqueue-msg-max")
    f.start(cid)
    _check_sysctl(f, cid, "/proc/sys/fs/mqueue/msg_max", "100")


assert fw.DEFAULT_LOG  # the module shares critest's constants
