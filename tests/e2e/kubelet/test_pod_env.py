"""A pod's environment and image pull credentials under `nodeagent up`, driven with the machine's kubectl
(issue 20 items 1 and 2).

A pod printing its environment shows every kind of variable with the values Kubernetes gives; a pod
whose Secret is missing waits in CreateContainerConfigError and starts once the Secret is created; an
image in a private registry (Debian's docker-registry with htpasswd on 127.0.0.1) is pulled with the
pod's imagePullSecrets, or its ServiceAccount's, and fails with the registry's reason without them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.kubelet.test_node_up import Cluster
from tests.harness.resources import unique
from tests.integration.images.registry import PASSWORD, REGISTRY_BIN, USER, Registry

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]

BUSYBOX = "localhost/busybox:latest"
KUBECTL_120 = Path(__file__).resolve().parents[3] / ".cache/kubectl-1.20/usr/bin/kubectl"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, images: Any) -> Iterator[Cluster]:
    d = tmp_path_factory.mktemp("env")
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(d / "images"), "import",
                    "--no-progress", str(images.busybox.docker_archive)], check=True, capture_output=True)
    c = Cluster(d, unique("nd"), unique("kb"))
    try:
        c.start()
        yield c
    finally:
        rc = c.shutdown()
    assert rc == 0, c.tail()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory, images: Any) -> Iterator[Registry]:
    if not Path(REGISTRY_BIN).exists() or not shutil.which("skopeo"):
        pytest.skip("docker-registry and skopeo are needed (make install adds them)")
    reg = Registry(tmp_path_factory.mktemp("private-registry"), htpasswd=True)
    try:
        reg.push(images.busybox.oci_dir, "latest", "private/busybox", "v1")
        yield reg
    finally:
        reg.stop()


def _waiting(pod: dict[str, Any]) -> dict[str, Any]:
    st = ((pod.get("status") or {}).get("containerStatuses") or [{}])[0]
    return (st.get("state") or {}).get("waiting") or {}


def _phase(*phases: str) -> Callable[[dict[str, Any]], bool]:
    return lambda p: (p.get("status") or {}).get("phase") in phases


def _apply(c: Cluster, *objs: dict[str, Any]) -> None:
    c.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def _env_lines(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        k, sep, v = line.partition("=")
        if sep:
            out[k] = v
    return out


def test_a_pod_sees_every_kind_of_variable_with_kubernetes_values(cluster: Cluster) -> None:
    c = cluster
    _apply(c,
           {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "env-creds"},
            "stringData": {"password": "s3cret", "user": "admin"}},
           {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "env-settings"},
            "data": {"MODE": "prod", "LEVEL": "debug", "1st": "digit-first"}},
           {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "env-web"},
            "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080},
                               {"name": "dns", "port": 53, "protocol": "UDP"}], "selector": {"app": "none"}}})
    svc = json.loads(c.kubectl("get", "service", "env-web", "-o", "json"))
    master = json.loads(c.kubectl("get", "service", "kubernetes", "-n", "default", "-o", "json"))
    ref = lambda path: {"valueFrom": {"fieldRef": {"fieldPath": path}}}  # noqa: E731
    c.apply({"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": "env-print", "labels": {"app": "printer"}, "annotations": {"note": "hi"}},
             "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                      "volumes": [{"name": "work", "emptyDir": {}}],
                      "containers": [{
                          "name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                          "command": ["sh", "-c",
                                      # the environment as the runtime gave it (sh, pid 1, drops names
                                      # that are not shell identifiers, such as 1st, from what it exports)
                                      "tr '\\0' '\\n' < /proc/1/environ; "
                                      "echo COMMAND=$(PLAIN)+'$$(PLAIN)'; touch /work/marker; "
                                      "echo SUBPATH=`ls /all`/`ls /all/*`"],
                          "volumeMounts": [{"name": "work", "mountPath": "/work",
                                            "subPathExpr": "$(POD_NAME)-$(PLAIN)"},
                                           {"name": "work", "mountPath": "/all"}],
                          "resources": {"limits": {"memory": "64Mi"}, "requests": {"cpu": "250m"}},
                          "envFrom": [{"configMapRef": {"name": "env-settings"}, "prefix": "CM_"},
                                      {"configMapRef": {"name": "env-settings"}},
                                      {"secretRef": {"name": "env-creds"}},
                                      {"secretRef": {"name": "env-absent", "optional": True}}],
                          "env": [
                              {"name": "PLAIN", "value": "one"},
                              {"name": "EXPANDED", "value": "$(PLAIN)-two-$(ENV_WEB_SERVICE_HOST)"},
                              {"name": "ESCAPED", "value": "$$(PLAIN)"},
                              {"name": "UNKNOWN", "value": "$(NOT_SET)"},
                              {"name": "MODE", "value": "override"},
                              {"name": "FROM_SECRET",
                               "valueFrom": {"secretKeyRef": {"name": "env-creds", "key": "password"}}},
                              {"name": "FROM_CM",
                               "valueFrom": {"configMapKeyRef": {"name": "env-settings", "key": "LEVEL"}}},
                              {"name": "OPTIONAL", "valueFrom": {"secretKeyRef": {
                                  "name": "env-absent", "key": "k", "optional": True}}},
                              {"name": "POD_NAME", **ref("metadata.name")},
                              {"name": "POD_NS", **ref("metadata.namespace")},
                              {"name": "POD_UID", **ref("metadata.uid")},
                              {"name": "POD_LABEL", **ref("metadata.labels['app']")},
                              {"name": "POD_ANNOTATION", **ref("metadata.annotations['note']")},
                              {"name": "NODE", **ref("spec.nodeName")},
                              {"name": "SA", **ref("spec.serviceAccountName")},
                              {"name": "HOST_IP", **ref("status.hostIP")},
                              {"name": "HOST_IPS", **ref("status.hostIPs")},
                              {"name": "POD_IP", **ref("status.podIP")},
                              {"name": "POD_IPS", **ref("status.podIPs")},
                              {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {
                                  "resource": "limits.memory", "divisor": "1Mi"}}},
                              {"name": "CPU_M", "valueFrom": {"resourceFieldRef": {
                                  "resource": "requests.cpu", "divisor": "1m"}}},
                              {"name": "CPU_LIMIT", "valueFrom": {"resourceFieldRef": {
                                  "resource": "limits.cpu"}}},
                          ]}]}})
    pod = c.wait_pod("env-print", _phase("Succeeded", "Failed"))
    assert pod["status"]["phase"] == "Succeeded", pod["status"]
    env = _env_lines(c.kubectl("logs", "env-print"))
    node = json.loads(c.kubectl("get", "node", c.node, "-o", "json"))
    st, meta = pod["status"], pod["metadata"]
    ip = svc["spec"]["clusterIP"]
    expected = {
        "PLAIN": "one", "EXPANDED": f"one-two-{ip}", "ESCAPED": "$(PLAIN)", "UNKNOWN": "$(NOT_SET)",
        "MODE": "override", "LEVEL": "debug", "CM_MODE": "prod", "CM_LEVEL": "debug",
        "CM_1st": "digit-first", "1st": "digit-first",
        "password": "s3cret", "user": "admin", "FROM_SECRET": "s3cret", "FROM_CM": "debug",
        "POD_NAME": "env-print", "POD_NS": "default", "POD_UID": meta["uid"], "POD_LABEL": "printer",
        "POD_ANNOTATION": "hi", "NODE": c.node, "SA": "default",
        "HOST_IP": st["hostIP"], "HOST_IPS": ",".join(h["ip"] for h in st["hostIPs"]),
        "POD_IP": st["podIP"], "POD_IPS": ",".join(p["ip"] for p in st["podIPs"]),
        "MEM_MI": "64", "CPU_M": "250", "CPU_LIMIT": node["status"]["allocatable"]["cpu"],
        "COMMAND": "one+$(PLAIN)",
        # the Services of the pod's namespace (enableServiceLinks defaults to true) and the master Service
        "ENV_WEB_SERVICE_HOST": ip, "ENV_WEB_SERVICE_PORT": "80", "ENV_WEB_SERVICE_PORT_HTTP": "80",
        "ENV_WEB_SERVICE_PORT_DNS": "53", "ENV_WEB_PORT": f"tcp://{ip}:80",
        "ENV_WEB_PORT_80_TCP": f"tcp://{ip}:80", "ENV_WEB_PORT_80_TCP_PROTO": "tcp",
        "ENV_WEB_PORT_80_TCP_PORT": "80", "ENV_WEB_PORT_80_TCP_ADDR": ip,
        "ENV_WEB_PORT_53_UDP": f"udp://{ip}:53", "ENV_WEB_PORT_53_UDP_PROTO": "udp",
        "ENV_WEB_PORT_53_UDP_PORT": "53", "ENV_WEB_PORT_53_UDP_ADDR": ip,
        "KUBERNETES_SERVICE_HOST": master["spec"]["clusterIP"],
        "KUBERNETES_SERVICE_PORT": str(master["spec"]["ports"][0]["port"]),
    }
    assert {k: env.get(k) for k in expected} == expected
    assert "OPTIONAL" not in env
    # subPathExpr expanded against the environment: the container wrote into <emptyDir>/env-print-one (seen
    # through a second mount of the whole emptyDir: a finished pod's volumes are torn down, as kubelet does)
    assert env["SUBPATH"] == "env-print-one/marker"
    events = c.events("env-print")
    # 1.32's relaxed names (RelaxedEnvironmentVariableValidation, on by default): `1st` is taken, not skipped
    assert not [e for e in events if e["reason"] == "InvalidEnvironmentVariableNames"]

    # enableServiceLinks: false keeps only the master Service's variables
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "env-nolinks"},
             "spec": {"restartPolicy": "Never", "enableServiceLinks": False,
                      "terminationGracePeriodSeconds": 1,
                      "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                                      "command": ["env"]}]}})
    c.wait_pod("env-nolinks", _phase("Succeeded"))
    env = _env_lines(c.kubectl("logs", "env-nolinks"))
    assert env["KUBERNETES_SERVICE_HOST"] == master["spec"]["clusterIP"]
    assert not [k for k in env if k.startswith("ENV_WEB_")]
    c.kubectl("delete", "pod", "env-print", "env-nolinks", "--wait=true")
    c.kubectl("delete", "service", "env-web")
    c.kubectl("delete", "secret", "env-creds")
    c.kubectl("delete", "configmap", "env-settings")


def test_a_missing_secret_waits_in_create_container_config_error_until_created(cluster: Cluster) -> None:
    c = cluster
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "env-late"},
             "spec": {"terminationGracePeriodSeconds": 1,
                      "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                                      "command": ["sh", "-c", "echo got $TOKEN; sleep 3600"],
                                      "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {
                                          "name": "late-secret", "key": "token"}}}]}]}})
    pod = c.wait_pod("env-late", lambda p: _waiting(p).get("reason") == "CreateContainerConfigError")
    assert _waiting(pod)["message"] == 'secret "late-secret" not found'
    assert pod["status"]["phase"] == "Pending"
    failed = [e for e in c.events("env-late") if e["reason"] == "Failed"]
    assert failed and failed[0]["message"] == 'Error: secret "late-secret" not found'
    assert failed[0]["type"] == "Warning"
    time.sleep(2)  # still waiting on later syncs: nothing was created
    assert _waiting(c.pod("env-late")).get("reason") == "CreateContainerConfigError"

    c.kubectl("create", "secret", "generic", "late-secret", "--from-literal=other=x")
    pod = c.wait_pod("env-late", lambda p: "couldn't find key" in _waiting(p).get("message", ""))
    assert _waiting(pod)["message"] == "couldn't find key token in Secret default/late-secret"

    c.kubectl("patch", "secret", "late-secret", "--type=merge", "-p",
              json.dumps({"stringData": {"token": "arrived"}}))
    c.wait_pod("env-late", _phase("Running"))
    end = time.monotonic() + 20
    while "got arrived" not in c.kubectl("logs", "env-late") and time.monotonic() < end:
        time.sleep(0.3)
    assert "got arrived" in c.kubectl("logs", "env-late")
    c.kubectl("delete", "pod", "env-late", "--wait=true")
    c.kubectl("delete", "secret", "late-secret")


def test_private_registry_pull_with_and_without_image_pull_secrets(cluster: Cluster,
                                                                   registry: Registry) -> None:
    c = cluster
    image = f"{registry.host}/private/busybox:v1"
    container = {"name": "c", "image": image, "imagePullPolicy": "Always", "command": ["sleep", "3600"]}

    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pull-anon"},
             "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]}})
    pod = c.wait_pod("pull-anon", lambda p: _waiting(p).get("reason") in ("ErrImagePull", "ImagePullBackOff"))
    failed = [e["message"] for e in c.events("pull-anon") if e["reason"] == "Failed"]
    assert failed and failed[0].startswith(f'Failed to pull image "{image}": '), failed
    # the registry's own reason (docker-registry's 401 body), as the kubelet shows it
    assert "401 Unauthorized: UNAUTHORIZED: authentication required" in failed[0], failed[0]
    assert _waiting(pod)["message"] == failed[0] or _waiting(pod)["reason"] == "ImagePullBackOff"

    # the pull Secret as kubectl 1.20 writes it (the newer kubectl writes the bad one below)
    subprocess.run([str(KUBECTL_120), "create", "secret", "docker-registry", "regcred",
                    f"--docker-server={registry.host}", f"--docker-username={USER}",
                    f"--docker-password={PASSWORD}"], env=c.env, check=True, capture_output=True, timeout=60)
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pull-secret"},
             "spec": {"terminationGracePeriodSeconds": 1, "imagePullSecrets": [{"name": "regcred"}],
                      "containers": [container]}})
    c.wait_pod("pull-secret", _phase("Running"), 90)
    assert "Pulled" in [e["reason"] for e in c.events("pull-secret")]

    # the ServiceAccount's imagePullSecrets, admitted into a pod that names none
    _apply(c, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "puller"},
               "imagePullSecrets": [{"name": "regcred"}]})
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pull-sa"},
             "spec": {"terminationGracePeriodSeconds": 1, "serviceAccountName": "puller",
                      "containers": [container]}})
    pod = c.wait_pod("pull-sa", _phase("Running"), 90)
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]

    # wrong credentials: the registry's refusal, as ErrImagePull
    c.kubectl("create", "secret", "docker-registry", "badcred", f"--docker-server={registry.host}",
              f"--docker-username={USER}", "--docker-password=wrong")
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pull-bad"},
             "spec": {"terminationGracePeriodSeconds": 1, "imagePullSecrets": [{"name": "badcred"}],
                      "containers": [container]}})
    c.wait_pod("pull-bad", lambda p: _waiting(p).get("reason") in ("ErrImagePull", "ImagePullBackOff"))
    failed = [e["message"] for e in c.events("pull-bad") if e["reason"] == "Failed"]
    assert failed and "401 Unauthorized" in failed[0] and "(access denied)" in failed[0], failed
    c.kubectl("delete", "pod", "pull-anon", "pull-secret", "pull-sa", "pull-bad", "--wait=true")
    c.kubectl("delete", "secret", "regcred", "badcred")
    c.kubectl("delete", "serviceaccount", "puller")
