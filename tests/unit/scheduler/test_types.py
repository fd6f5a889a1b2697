from nodeagent.scheduler.framework.types import NodeInfo, PodInfo, node_taints, pod_requests
from nodeagent.testing.fake_cluster import make_node


def _c(cpu=None, mem=None, **kw):
    r = {}
    if cpu:
        r["cpu"] = cpu
    if mem:
        r["memory"] = mem
    c = {"name": "x", "image": "i", "resources": {"requests": r}}
    c.update(kw)
    return c


def test_init_containers_count_as_max_of_max_init_and_sum_app_plus_overhead():
    spec = {"containers": [_c("100m", "100Mi"), _c("200m", "50Mi")],
            "initContainers": [_c("500m", "10Mi"), _c("100m", "300Mi")],
            "overhead": {"cpu": "10m", "memory": "1Mi"}}
    r = pod_requests(spec)
    assert r["cpu"] == 510  # max(500, 300) + 10
    assert r["memory"] == (300 + 1) * 2**20  # max(300, 150) + 1


def test_sidecar_init_containers_add_to_running_total():
    spec = {"containers": [_c("100m")],
            "initContainers": [_c("200m", restartPolicy="Always"), _c("1")]}
    # the regular init runs beside the sidecar: 200m + 1000m; running: 100m + 200m sidecar
    assert pod_requests(spec)["cpu"] == 1200


def test_limits_stand_in_for_missing_requests_and_non_zero_defaults():
    spec = {"containers": [{"name": "a", "resources": {"limits": {"cpu": "2"}}}, {"name": "b"}]}
    assert pod_requests(spec) == {"cpu": 2000}
    nz = pod_requests(spec, non_zero=True)
    assert nz["cpu"] == 2100 and nz["memory"] == 2 * 200 * 2**20


def test_node_info_aggregates_follow_add_and_remove():
    ni = NodeInfo(make_node("n", cpu="4", memory="8Gi", extra={"example.com/gpu": "2"}))
    p = PodInfo({"metadata": {"name": "p", "uid": "u"}, "spec": {"containers": [
        {"name": "c", "resources": {"requests": {"cpu": "1", "example.com/gpu": "1"}},
         "ports": [{"containerPort": 80, "hostPort": 8080}]}]}})
    ni.add_pod(p)
    assert (ni.req_cpu, ni.req_scalar["example.com/gpu"], ni.alloc_scalar["example.com/gpu"]) == (1000, 1, 2)
    assert ni.ports_conflict((("TCP", 8080, "10.0.0.1"),))
    assert not ni.ports_conflict((("UDP", 8080, "0.0.0.0"),))
    c = ni.clone()
    c.remove_pod(p)
    assert c.req_cpu == 0 and ni.req_cpu == 1000 and not c.used_ports and ni.used_ports
    assert ni.remove_pod(p) and not ni.remove_pod(p)
    assert ni.req_cpu == 0 and ni.nz_mem == 0 and not ni.pods


def test_bad_conditions_become_taints_unless_already_there():
    n = make_node("n", conditions=[{"type": "Ready", "status": "False"},
                                   {"type": "MemoryPressure", "status": "True"}])
    assert {t["key"] for t in node_taints(n)} == {
        "node.kubernetes.io/not-ready", "node.kubernetes.io/memory-pressure"}
    n["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]
    effects = {t["key"]: t["effect"] for t in node_taints(n)}
    assert effects["node.kubernetes.io/not-ready"] == "NoExecute"
    assert node_taints(n, from_conditions=False) == n["spec"]["taints"]
