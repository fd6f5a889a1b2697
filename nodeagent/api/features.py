"""The Kubernetes feature gates this cluster's behaviour answers to, as each component advertises them in
`kubernetes_feature_enabled{name, stage}` on its /metrics (component-base's featuregate metric). Only gates
whose feature is built here are listed, each as Kubernetes 1.33 names and stages it."""

from __future__ import annotations

FEATURE_METRIC = "kubernetes_feature_enabled"
FEATURE_HELP = "This metric records the data about the stage and enablement of a k8s feature."

# name -> (stage, enabled)
FEATURES: dict[str, tuple[str, bool]] = {
    "ImageVolume": ("BETA", True),  # volumes[].image, mounted by the runtime (KEP-4639)
}
