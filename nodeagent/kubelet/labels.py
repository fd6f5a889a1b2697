"""The labels and annotations the kubelet puts on CRI sandboxes and containers (kubelet's types/labels.go)."""

POD_UID_LABEL = "io.kubernetes.pod.uid"
POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"
HASH_ANNOTATION = "io.kubernetes.container.hash"
