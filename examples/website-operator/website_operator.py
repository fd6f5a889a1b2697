"""The Website operator: a `Website` (websites.example.com/v1: image, replicas, html) becomes a ConfigMap
holding its page, a Deployment serving it and a Service in front, all owned by the Website (deleting it
deletes them through the garbage collector).

kopf is the seed's custom-controller pattern, packaged: it lists and watches Websites (the informer), queues
each object's changes per object, latest state wins (the workqueue), and calls the handlers below (the
reconcile), retrying them with back-off when they raise, and reporting every outcome as an Event on the
Website (`kubectl get events`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kopf
from kubernetes import client, config
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL = "example.com", "v1", "websites"
DEFAULT_IMAGE = "localhost/httpd:v1"  # busybox httpd serving /var/www
PAGE_DIRS = ("/var/www", "/usr/share/nginx/html")  # busybox httpd's and nginx's document roots


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    """In a pod: the mounted ServiceAccount token; elsewhere: the kubeconfig (for a run from a laptop)."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    settings.posting.loggers = True  # handlers' log lines (and kopf's outcomes) become Events: kopf >= 1.45
    settings.posting.level = 20  # INFO and above


def _children(name: str, namespace: str, spec: dict[str, Any], html: str) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": "website", "app.kubernetes.io/instance": name}
    volume_mounts = [{"name": "page", "mountPath": d, "readOnly": True} for d in PAGE_DIRS]
    configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": f"{name}-html", "namespace": namespace, "labels": labels},
                 "data": {"index.html": html}}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"replicas": int(spec.get("replicas", 1)), "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "web", "image": spec.get("image") or DEFAULT_IMAGE,
                                     "imagePullPolicy": "IfNotPresent", "ports": [{"containerPort": 80}],
                                     "volumeMounts": volume_mounts}],
                     "volumes": [{"name": "page", "configMap": {"name": f"{name}-html"}}]}}}}
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": namespace, "labels": labels},
               "spec": {"selector": labels, "ports": [{"name": "http", "port": 80, "targetPort": 80}]}}
    return [configmap, deployment, service]


def _apply(obj: dict[str, Any]) -> str:
    """Create the object, or bring an existing one to the wanted spec/data; 'created' or 'updated'."""
    api_client = client.ApiClient()
    kind, ns, name = obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"]
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    verbs: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
        "ConfigMap": (core.create_namespaced_config_map, core.patch_namespaced_config_map),
        "Service": (core.create_namespaced_service, core.patch_namespaced_service),
        "Deployment": (apps.create_namespaced_deployment, apps.patch_namespaced_deployment)}
    create, patch = verbs[kind]
    try:
        create(ns, obj)
        return "created"
    except ApiException as e:
        if e.status != 409:
            raise
    body = {"metadata": {"labels": obj["metadata"]["labels"]}}
    if kind == "ConfigMap":
        body["data"] = obj["data"]
    elif kind == "Deployment":
        body["spec"] = {"replicas": obj["spec"]["replicas"], "template": obj["spec"]["template"]}
    else:
        body["spec"] = {"ports": obj["spec"]["ports"]}
    patch(name, ns, body)
    return "updated"


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def reconcile(spec: kopf.Spec, name: str, namespace: str | None, body: kopf.Body, logger: kopf.Logger,
              patch: kopf.Patch, **_: Any) -> None:
    """Bring the Website's ConfigMap, Deployment and Service to its spec. A page taken from a ConfigMap
    (`htmlFrom.configMapKeyRef`) that does not exist yet is a temporary error: kopf retries in 5 s."""
    namespace = namespace or "default"  # Websites are namespaced: kopf always passes one
    html = spec.get("html")
    ref = (spec.get("htmlFrom") or {}).get("configMapKeyRef")
    if html is None and ref:
        try:
            cm = client.CoreV1Api().read_namespaced_config_map(ref["name"], namespace)
        except ApiException as e:
            if e.status == 404:
                raise kopf.TemporaryError(f"ConfigMap {ref['name']} not found yet", delay=5) from None
            raise
        html = (cm.data or {}).get(ref.get("key", "index.html"))
        if html is None:
            raise kopf.TemporaryError(f"ConfigMap {ref['name']} has no key {ref.get('key')}", delay=5)
    if html is None:
        raise kopf.PermanentError("spec.html or spec.htmlFrom.configMapKeyRef is required")
    done = []
    for child in _children(name, namespace, dict(spec), html):
        kopf.adopt(child, owner=body)
        done.append(f"{child['kind']} {_apply(child)}")
    logger.info("reconciled: %s", ", ".join(done))
    patch.status["phase"] = "Ready"
    patch.status["url"] = f"http://{name}.{namespace}.svc.cluster.local/"
    patch.status["replicas"] = int(spec.get("replicas", 1))
