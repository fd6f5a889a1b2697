"""Both real kubectls (1.32 and Debian's 1.20) against a real `nodeagent server`, unchanged manifests."""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest
import yaml

from tests.integration.apiserver.conftest import MANIFESTS

pytestmark = pytest.mark.e2e
ALL = [str(MANIFESTS / f) for f in ("simple-pod.yaml", "nginx-deployment.yaml", "simple-service.yaml")]


def new_ns(kubectl) -> str:
    ns = f"t-{uuid.uuid4().hex[:8]}"
    out = kubectl("create", "namespace", ns)
    assert f"namespace/{ns} created" in out
    return ns


def test_apply_reapply_edit_get_delete(kubectl, tmp_path):
    ns = new_ns(kubectl)
    args = [a for f in ALL for a in ("-f", f)]
    out = kubectl("apply", "-n", ns, *args)
    assert "pod/nginx created" in out and "deployment.apps/nginx-deployment created" in out
    assert "service/my-service created" in out
    out = kubectl("apply", "-n", ns, *args)
    assert out.count("unchanged") == 3, out
    edited = (MANIFESTS / "nginx-deployment.yaml").read_text().replace("replicas: 3", "replicas: 2") \
        .replace("nginx:1.14.2", "nginx:1.16.1")
    out = kubectl("apply", "-n", ns, "-f", "-", input=edited)
    assert "deployment.apps/nginx-deployment configured" in out
    dep = json.loads(kubectl("get", "-n", ns, "deployment", "nginx-deployment", "-o", "json"))
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.16.1"
    assert dep["metadata"]["generation"] == 2
    assert dep["spec"]["strategy"]["type"] == "RollingUpdate"  # defaulted
    pod = yaml.safe_load(kubectl("get", "-n", ns, "pod", "nginx", "-o", "yaml"))
    assert pod["spec"]["restartPolicy"] == "Always" and pod["spec"]["dnsPolicy"] == "ClusterFirst"
    assert pod["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert pod["metadata"]["uid"] and pod["metadata"]["creationTimestamp"]
    port = kubectl("get", "-n", ns, "pod", "nginx", "-o",
                   "jsonpath={.spec.containers[0].ports[0].containerPort}")
    assert port == "80"
    wide = kubectl("get", "-n", ns, "pods", "-o", "wide")
    assert wide.split("\n")[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP",
                                           "NODE", "NOMINATED",
                                           "NODE", "READINESS", "GATES"]
    assert "nginx" in wide and "Pending" in wide
    svc = kubectl("get", "-n", ns, "svc", "my-service")
    assert svc.split("\n")[0].split() == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    assert "80/TCP" in svc and "10." in svc
    deps = kubectl("get", "-n", ns, "deploy", "-o", "wide")
    assert "nginx:1.16.1" in deps and "app=nginx" in deps
    out = kubectl("delete", "-n", ns, *args)
    assert 'pod "nginx" deleted' in out and 'service "my-service" deleted' in out
    p = kubectl.run("get", "-n", ns, "pod", "nginx", check=False)
    assert p.returncode != 0 and 'pods "nginx" not found' in p.stderr


def test_describe_label_annotate_scale(kubectl):
    ns = new_ns(kubectl)
    kubectl("apply", "-n", ns, "-f", str(MANIFESTS / "simple-pod.yaml"), "-f",
            str(MANIFESTS / "nginx-deployment.yaml"))
    assert "pod/nginx labeled" in kubectl("label", "-n", ns, "pod", "nginx", "tier=web")
    assert "pod/nginx annotated" in kubectl("annotate", "-n", ns, "pod", "nginx", "owner=me")
    shown = kubectl("get", "-n", ns, "pods", "-l", "tier=web", "--show-labels")
    assert "nginx" in shown and "tier=web" in shown
    assert "No resources found" in kubectl.run("get", "-n", ns, "pods", "-l", "tier=db").stderr
    desc = kubectl("describe", "-n", ns, "pod", "nginx")
    assert "nginx:1.14.2" in desc and "tier=web" in desc and "owner: me" in desc
    assert "node.kubernetes.io/not-ready:NoExecute op=Exists for 300s" in desc
    assert "scaled" in kubectl("scale", "-n", ns, "deployment", "nginx-deployment", "--replicas=5")
    assert kubectl("get", "-n", ns, "deploy", "nginx-deployment", "-o", "jsonpath={.spec.replicas}") == "5"
    # 1.20 says labeled, 1.32 unlabeled
    assert "labeled" in kubectl("label", "-n", ns, "pod", "nginx", "tier-")
    assert "tier" not in kubectl("get", "-n", ns, "pod", "nginx", "-o", "jsonpath={.metadata.labels}")


def test_create_generators_namespace_configmap_deployment(kubectl):
    """kubectl 1.32 sends these as protobuf bodies; the server decodes them."""
    ns = new_ns(kubectl)
    assert "configmap/cm1 created" in kubectl("create", "-n", ns, "configmap", "cm1", "--from-literal=a=b",
                                              "--from-literal=c=d")
    cm = json.loads(kubectl("get", "-n", ns, "cm", "cm1", "-o", "json"))
    assert cm["data"] == {"a": "b", "c": "d"}
    assert "deployment.apps/web created" in kubectl("create", "-n", ns, "deployment", "web",
                                                    "--image=busybox:1.36")
    dep = json.loads(kubectl("get", "-n", ns, "deploy", "web", "-o", "json"))
    assert dep["spec"]["selector"]["matchLabels"] == {"app": "web"}
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:1.36"
    assert dep["spec"]["replicas"] == 1
    kubectl("delete", "namespace", ns, "--wait=false")


def test_get_watch_sees_changes(kubectl):
    ns = new_ns(kubectl)
    w = subprocess.Popen([kubectl.binary, "get", "pods", "-n", ns, "-w"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=kubectl.server.env())
    try:
        time.sleep(1.0)
        kubectl("apply", "-n", ns, "-f", str(MANIFESTS / "simple-pod.yaml"))
        kubectl("label", "-n", ns, "pod", "nginx", "x=y")
        kubectl("delete", "-n", ns, "pod", "nginx")
        time.sleep(1.0)
    finally:
        w.terminate()
        out, err = w.communicate(timeout=10)
    lines = [ln for ln in out.splitlines() if ln.startswith("nginx")]
    assert len(lines) >= 2, (out, err)
    assert "Pending" in lines[0]


def test_api_resources_and_versions(kubectl):
    out = kubectl("api-resources")
    for expected in ("pods", "deployments", "leases", "endpointslices", "priorityclasses",
                     "poddisruptionbudgets",
                     "networkpolicies", "cronjobs"):
        assert expected in out
    assert "po " in out and "deploy" in out
    assert "apps/v1" in kubectl("api-versions")


def test_cordon_and_drain_with_eviction(kubectl):
    ns = new_ns(kubectl)
    node = f"n-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
    assert f"node/{node} cordoned" in kubectl("cordon", node)
    assert kubectl("get", "node", node, "-o", "jsonpath={.spec.unschedulable}") == "true"
    assert "SchedulingDisabled" in kubectl("get", "node", node)
    for i in range(2):
        kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}"},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "busybox"}]}}))
    out = kubectl.run("drain", node, "--force", "--grace-period=0", "--timeout=30s", check=False)
    assert out.returncode == 0, out.stderr
    assert "evicting pod" in (out.stdout + out.stderr)
    assert "No resources found" in kubectl.run("get", "-n", ns, "pods").stderr
    assert f"node/{node} uncordoned" in kubectl("uncordon", node)
    kubectl("delete", "node", node)


def test_errors_print_like_kubernetes(kubectl, tmp_path):
    p = kubectl.run("get", "pod", "does-not-exist", check=False)
    assert p.returncode == 1 and 'Error from server (NotFound): pods "does-not-exist" not found' in p.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\ndata:\n  a: b\n")
    p = kubectl.run("apply", "-f", str(bad), check=False)
    assert p.returncode == 1 and "is invalid" in p.stderr and "metadata.name" in p.stderr
    p = kubectl.run("apply", "-n", "no-such-ns", "-f", str(MANIFESTS / "simple-pod.yaml"), check=False)
    assert p.returncode == 1 and 'namespaces "no-such-ns" not found' in p.stderr
    ns = new_ns(kubectl)
    p = kubectl.run("create", "namespace", ns, check=False)
    assert p.returncode == 1 and f'namespaces "{ns}" already exists' in p.stderr


def test_server_side_apply_and_namespace_delete(kubectl):
    ns = new_ns(kubectl)
    out = kubectl("apply", "--server-side", "-n", ns, "-f", str(MANIFESTS / "nginx-deployment.yaml"))
    assert "deployment.apps/nginx-deployment serverside-applied" in out
    edited = (MANIFESTS / "nginx-deployment.yaml").read_text().replace("replicas: 3", "replicas: 4")
    out = kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=edited)
    assert "serverside-applied" in out
    assert kubectl("get", "-n", ns, "deploy", "nginx-deployment", "-o", "jsonpath={.spec.replicas}") == "4"
    assert "deployment.apps/nginx-deployment" in kubectl("get", "-n", ns, "all")
    out = kubectl("delete", "namespace", ns, timeout=90)  # waits until the namespace is really gone
    assert f'namespace "{ns}" deleted' in out
    assert kubectl.run("get", "namespace", ns, check=False).returncode == 1


def test_logs_and_exec_without_a_kubelet_say_why(kubectl):
    ns = new_ns(kubectl)
    node = f"n-{uuid.uuid4().hex[:6]}"
    kubectl("apply", "-f", "-",
            input=yaml.safe_dump({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))
    kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}}))
    p = kubectl.run("logs", "-n", ns, "p", check=False)
    assert p.returncode != 0 and f'no kubelet API serves node "{node}"' in p.stderr
    p = kubectl.run("exec", "-n", ns, "p", "--", "true", check=False, timeout=60)
    assert p.returncode != 0 and "kubelet" in p.stderr, p.stderr
    kubectl("delete", "node", node)


def test_more_generators_and_rbac_objects(kubectl):
    ns = new_ns(kubectl)
    assert "created" in kubectl("create", "-n", ns, "secret", "generic", "s1", "--from-literal=a=b")
    assert kubectl("get", "-n", ns, "secret", "s1", "-o", "jsonpath={.data.a}") == "Yg=="
    assert "created" in kubectl("create", "-n", ns, "service", "clusterip", "svc1", "--tcp=80:8080")
    assert kubectl("get", "-n", ns, "svc", "svc1", "-o", "jsonpath={.spec.ports[0].targetPort}") == "8080"
    assert "created" in kubectl("create", "-n", ns, "rolebinding", "rb", "--clusterrole=view", "--user=bob")
    bound = kubectl("get", "-n", ns, "rolebinding", "rb", "-o",
                    "jsonpath={.roleRef.name}/{.subjects[0].name}")
    assert bound == "view/bob"
    assert "created" in kubectl("create", "-n", ns, "job", "j1", "--image=busybox", "--", "echo", "hi")
    policy = kubectl("get", "-n", ns, "job", "j1", "-o", "jsonpath={.spec.template.spec.restartPolicy}")
    assert policy == "Never"
    assert kubectl("auth", "can-i", "create", "pods").strip() == "yes"


def test_custom_resource_definition_and_objects(kubectl):
    """The CronTab example from the Kubernetes docs: define, wait established, create, get, delete."""
    ns = new_ns(kubectl)
    kubectl("apply", "-f", str(MANIFESTS / "resourcedefinition.yaml"))
    out = kubectl("wait", "--for", "condition=established", "--timeout=30s",
                  "crd/crontabs.stable.example.com")
    assert "condition met" in out
    assert "crontab.stable.example.com/my-new-cron-object created" in kubectl(
        "apply", "-n", ns, "-f", str(MANIFESTS / "my-crontab.yaml"))
    assert "my-new-cron-object" in kubectl("get", "-n", ns, "crontab")
    assert kubectl("get", "-n", ns, "ct", "my-new-cron-object", "-o", "jsonpath={.spec.image}") == \
        "my-awesome-cron-image"
    assert "crontabs" in kubectl("api-resources", "--api-group=stable.example.com")
    kubectl("delete", "-n", ns, "crontab", "my-new-cron-object")
    kubectl("delete", "-f", str(MANIFESTS / "resourcedefinition.yaml"))
