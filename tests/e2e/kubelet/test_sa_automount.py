"""The ServiceAccount token inside a pod under `nodeagent up` (issue 21 items 2 and 6, the token half):
the admission plugin's kube-api-access volume, projected by the kubelet with a pod-bound token from
TokenRequest, the cluster CA and the namespace, read-only at /var/run/secrets/kubernetes.io/serviceaccount;
the token reaches the apiserver (kubectl --token from the host, and from inside the pod through the
`kubernetes` Service), and dies with the pod."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest

from tests.e2e.kubelet.test_node_up import Cluster
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

BUSYBOX = "localhost/busybox:latest"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, images: Any) -> Iterator[Cluster]:
    d = tmp_path_factory.mktemp("sa")
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(d / "images"), "import",
                    "--no-progress", str(images.busybox.docker_archive)], check=True, capture_output=True)
    c = Cluster(d, unique("nd"), unique("kb"))
    # pods reach the apiserver through the `kubernetes` Service, whose endpoint is the advertised address:
    # 127.0.0.1 would be each pod's own loopback
    c.extra = ["--bind-address", "0.0.0.0"]
    try:
        c.start()
        yield c
    finally:
        rc = c.shutdown()
    assert rc == 0, c.tail()


def _pod(name: str, script: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"terminationGracePeriodSeconds": 1, **spec,
                     "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", script]}]}}


def _host_pod(name: str, script: str) -> dict[str, Any]:
    """A pod with the host's / at /host: it runs host programs (chroot) in its own network namespace."""
    pod = _pod(name, script, restartPolicy="Never", volumes=[{"name": "host", "hostPath": {"path": "/"}}])
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "host", "mountPath": "/host"}]
    return pod


def _finished(p: dict[str, Any]) -> bool:
    return (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _as(c: Cluster, token: str, *args: str) -> subprocess.CompletedProcess:
    cfg = json.loads(c.kubectl("config", "view", "--raw", "-o", "json"))
    server = cfg["clusters"][0]["cluster"]["server"]
    return subprocess.run(["kubectl", "--kubeconfig", "/dev/null", "--server", server,
                           "--certificate-authority", str(c.data_dir / "pki" / "ca.crt"), "--token", token,
                           *args], capture_output=True, text=True, timeout=60)


def test_a_pod_gets_its_token_ca_and_namespace_and_the_token_works(cluster: Cluster) -> None:
    c = cluster
    script = (f"cat {SA_DIR}/namespace; echo; cat {SA_DIR}/token; echo; head -1 {SA_DIR}/ca.crt; "
              f"touch {SA_DIR}/x 2>/dev/null || echo READONLY; sleep 3600")
    c.apply(_pod("sa-reader", script))
    pod = c.wait_pod("sa-reader", lambda p: "READONLY" in c.kubectl("logs", "sa-reader", check=False))
    vols = [v for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access-")]
    assert len(vols) == 1 and len(vols[0]["name"]) == len("kube-api-access-") + 5
    sources = vols[0]["projected"]["sources"]
    assert sources[0] == {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}
    assert pod["spec"]["containers"][0]["volumeMounts"][-1] == {
        "name": vols[0]["name"], "readOnly": True, "mountPath": SA_DIR}
    ns, token, ca_head, ro = c.kubectl("logs", "sa-reader").splitlines()[:4]
    assert (ns, ca_head, ro) == ("default", "-----BEGIN CERTIFICATE-----", "READONLY")
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["sub"] == "system:serviceaccount:default:default"
    assert claims["kubernetes.io"]["pod"] == {"name": "sa-reader", "uid": pod["metadata"]["uid"]}
    assert claims["kubernetes.io"]["node"]["name"] == c.node
    assert claims["kubernetes.io"]["warnafter"] - claims["iat"] == 3607  # extended, warning after 3607 s
    p = _as(c, token, "get", "pods")
    assert p.returncode == 1 and 'User "system:serviceaccount:default:default" cannot list' in p.stderr
    c.kubectl("delete", "pod", "sa-reader", "--grace-period=0", "--force")
    p = _as(c, token, "get", "pods")
    assert p.returncode == 1 and "Unauthorized" in p.stderr


def test_from_inside_the_pod_through_the_kubernetes_service(cluster: Cluster) -> None:
    """The seed's in-cluster recipe, in the pod's network namespace: curl with the mounted token and CA to
    https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (the `kubernetes` Service's ClusterIP, its
    certificate verified). busybox's wget cannot speak the apiserver's TLS, so the pod runs the host's curl
    (chroot into a hostPath of /), with the pod's own token, CA and network."""
    c = cluster
    if not shutil.which("curl"):
        pytest.skip("curl is not installed")
    ca = f"/tmp/{unique('sa-ca')}.crt"
    script = (f"cp {SA_DIR}/ca.crt /host{ca}; chroot /host curl -sS --cacert {ca} "
              f"--header \"Authorization: Bearer $(cat {SA_DIR}/token)\" "
              "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api; echo; "
              f"chroot /host curl -sS --cacert {ca} --header \"Authorization: Bearer $(cat {SA_DIR}/token)\" "
              "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/default/pods; "
              f"echo; rm -f /host{ca}")
    try:
        c.apply(_host_pod("sa-incluster", script))
        c.wait_pod("sa-incluster", _finished)
        lines = [json.loads(x) for x in c.kubectl("logs", "sa-incluster").splitlines() if x.strip()]
    finally:
        Path(ca).unlink(missing_ok=True)
    assert lines[0]["kind"] == "APIVersions", lines
    assert lines[1]["code"] == 403
    assert 'User "system:serviceaccount:default:default" cannot list resource "pods"' in lines[1]["message"]
    c.kubectl("delete", "pod", "sa-incluster", "--grace-period=0", "--force")


INCLUSTER = """
import json, sys
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.config import incluster_config
d = sys.argv[1]
# the files of the pod, copied where the chrooted process sees them (no quote: sh -c wraps this)
incluster_config.SERVICE_TOKEN_FILENAME, incluster_config.SERVICE_CERT_FILENAME = d + "/token", d + "/ca.crt"
config.load_incluster_config()
out = {"host": client.Configuration.get_default_copy().host}
out["resources"] = len(client.CoreV1Api().get_api_resources().resources)
try:
    client.CoreV1Api().list_namespaced_pod("default")
    out["list"] = "allowed"
except ApiException as e:
    out["list"], out["message"] = e.status, json.loads(e.body)["message"]
print(json.dumps(out))
"""


def test_the_python_client_in_cluster_config(cluster: Cluster) -> None:
    """kubernetes.config.load_incluster_config() in the pod's network namespace, with the pod's
    KUBERNETES_SERVICE_HOST/PORT, token and CA: the host's Python (chroot into a hostPath of /), since the
    test images carry only busybox; its token and CA files are the pod's, copied out for it."""
    c = cluster
    d = Path(f"/tmp/{unique('sa-py')}")
    script = (f"mkdir -p /host{d} && cp {SA_DIR}/token {SA_DIR}/ca.crt /host{d}/ && "
              f"chroot /host {sys.executable} -c '{INCLUSTER}' {d}")
    try:
        c.apply(_host_pod("sa-python", script))
        done = c.wait_pod("sa-python", _finished)
        logs = c.kubectl("logs", "sa-python")
    finally:
        shutil.rmtree(d, ignore_errors=True)
    assert done["status"]["phase"] == "Succeeded", logs
    out = json.loads(logs.strip().splitlines()[-1])
    master = json.loads(c.kubectl("get", "service", "kubernetes", "-n", "default", "-o", "json"))
    assert out["host"] == f"https://{master['spec']['clusterIP']}:443"
    assert out["resources"] > 10
    assert out["list"] == 403
    assert 'User "system:serviceaccount:default:default" cannot list resource "pods"' in out["message"]
    c.kubectl("delete", "pod", "sa-python", "--grace-period=0", "--force")


def test_automount_off_on_the_pod_or_its_account(cluster: Cluster) -> None:
    c = cluster
    c.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "quiet"},
        "automountServiceAccountToken": False}))
    c.apply(_pod("sa-off", "sleep 3600", serviceAccountName="quiet"))
    c.apply(_pod("sa-on", "sleep 3600", serviceAccountName="quiet", automountServiceAccountToken=True))
    off, on = c.pod("sa-off"), c.pod("sa-on")
    assert not off["spec"].get("volumes") and "volumeMounts" not in off["spec"]["containers"][0]
    assert any(v["name"].startswith("kube-api-access-") for v in on["spec"]["volumes"])
    p = subprocess.run(["kubectl", "apply", "-f", "-"], input=json.dumps(_pod("sa-none", "true",
                       serviceAccountName="missing", nodeName=c.node)), capture_output=True, text=True,
                       env=c.env)
    assert p.returncode == 1
    assert ('pods "sa-none" is forbidden: error looking up service account default/missing: '
            'serviceaccount "missing" not found') in p.stderr
    c.kubectl("delete", "pod", "sa-off", "sa-on", "--grace-period=0", "--force")
