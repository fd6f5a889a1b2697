"""kubelet: the node agent's pod lifecycle.

Library modules (pure or local-only, wired into the pod workers by the kubelet runner):
clock (Clock, FakeClock), resources (cgroup arithmetic, oom_score_adj, QoS cgroups, allocatable),
volumes (emptyDir, hostPath, configMap, secret, downwardAPI, projected), prober (probes, workers,
results), backoff (CrashLoopBackOff, image pull), eviction (thresholds, signals, manager), status
(pod status, container hash), pod_actions (what a sync must do), images (pull decisions), pleg
(relist diff, health), static_pods (manifest directory, mirror pods), node_status (Node fields).
"""
