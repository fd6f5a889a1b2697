from nodeagent.api.qos import BEST_EFFORT, BURSTABLE, GUARANTEED, compute_pod_qos, pod_qos
from tests.unit.kubelet.podspecs import container, pod

G = {"cpu": "100m", "memory": "100Mi"}


def test_no_resources_is_besteffort():
    assert compute_pod_qos(pod(container(), container("d"))) == BEST_EFFORT


def test_zero_requests_are_ignored():
    assert compute_pod_qos(pod(container(requests={"cpu": "0", "memory": "0"}))) == BEST_EFFORT


def test_non_qos_resources_do_not_count():
    assert compute_pod_qos(pod(container(requests={"ephemeral-storage": "1Gi"},
                                         limits={"ephemeral-storage": "1Gi"}))) == BEST_EFFORT


def test_equal_requests_and_limits_everywhere_is_guaranteed():
    p = pod(container(requests=G, limits=G), container("d", requests=G, limits=G))
    assert compute_pod_qos(p) == GUARANTEED


def test_limits_only_default_requests_to_limits():
    assert compute_pod_qos(pod(container(limits=G))) == GUARANTEED


def test_limit_on_one_resource_only_is_burstable():
    assert compute_pod_qos(pod(container(limits={"cpu": "1"}))) == BURSTABLE


def test_requests_below_limits_is_burstable():
    assert compute_pod_qos(pod(container(requests={"cpu": "50m", "memory": "100Mi"}, limits=G))) == BURSTABLE


def test_one_container_without_limits_makes_it_burstable():
    assert compute_pod_qos(pod(container(requests=G, limits=G), container("d"))) == BURSTABLE


def test_init_containers_count():
    p = pod(container(requests=G, limits=G), init=[container("i", requests={"cpu": "10m"})])
    assert compute_pod_qos(p) == BURSTABLE
    p = pod(container(), init=[container("i", requests={"cpu": "10m"})])
    assert compute_pod_qos(p) == BURSTABLE
    p = pod(container(limits=G), init=[container("i", limits={"cpu": "1", "memory": "1Gi"})])
    assert compute_pod_qos(p) == GUARANTEED


def test_sums_are_compared_not_each_container():
    # Kubernetes compares the summed requests with the summed limits.
    a = container("a", requests={"cpu": "200m", "memory": "100Mi"}, limits={"cpu": "100m", "memory": "100Mi"})
    b = container("b", requests={"cpu": "100m", "memory": "100Mi"}, limits={"cpu": "200m", "memory": "100Mi"})
    assert compute_pod_qos(pod(a, b)) == GUARANTEED


def test_equal_values_in_different_units():
    assert compute_pod_qos(pod(container(requests={"cpu": "1", "memory": "1Gi"},
                                         limits={"cpu": "1000m", "memory": "1024Mi"}))) == GUARANTEED


def test_pod_level_resources_decide():
    p = pod(container(), resources={"limits": G})
    assert compute_pod_qos(p) == GUARANTEED


def test_recorded_status_wins():
    p = pod(container())
    p["status"] = {"qosClass": BURSTABLE}
    assert pod_qos(p) == BURSTABLE
    assert compute_pod_qos(p) == BEST_EFFORT
