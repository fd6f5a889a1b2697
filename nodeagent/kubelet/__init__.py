"""kubelet: the node agent's pod lifecycle.

Library modules (pure or local-only, wired into the pod workers by the kubelet runner; every time-dependent
one takes a `nodeagent.clock.Clock`): resources (cgroup arithmetic, oom_score_adj, QoS cgroups, allocatable),
volumes (emptyDir, hostPath, configMap, secret, downwardAPI, projected), prober (probes, workers,
results), backoff (CrashLoopBackOff, image pull), eviction (thresholds, signals, manager), status
(pod status, container hash), pod_actions (what a sync must do), images (pull decisions), pleg
(relist diff, health), static_pods (manifest directory, mirror pods), node_status (Node fields),
tls_bootstrap (discovery with a bootstrap token, then the node's own client certificate).
"""
