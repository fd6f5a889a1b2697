"""Storage on `nodeagent up` with the real kernel and kubectl: the default `local-path` class, binding on
the first consumer, data that outlives its pod, Delete vs Retain, static local PVs bind-mounted by the
kubelet, expansion, and the reasons a claim waits (issue 22 items 1–3).

One cluster per module under a private data dir; pods are placed by the scheduler (no spec.nodeName), so
the VolumeBinding plugin picks the node and the node's provisioner makes the directory under
`<data dir>/storage`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.e2e.kubelet.test_node_up import BUSYBOX, Cluster, _running, _wait_runtime_empty
from tests.harness.resources import unique

pytestmark = [pytest.mark.root, pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, images):
    d = tmp_path_factory.mktemp("up-storage")
    subprocess.run([sys.executable, "-m", "nodeagent", "image", "--state-dir", str(d / "images"), "import",
                    "--no-progress", str(images.busybox.docker_archive)], check=True, capture_output=True)
    c = Cluster(d, unique("nd"), unique("kb"))
    try:
        c.start()
        yield c
    finally:
        c.kubectl("delete", "pods", "--all", "--wait=true", "--timeout=90s", check=False)
        c.kubectl("delete", "pvc", "--all", "--wait=true", "--timeout=60s", check=False)
        _wait_runtime_empty(c)
        rc = c.stop()
    assert rc == 0, c.tail()
    assert str(d) not in Path("/proc/mounts").read_text(), "a mount under the data dir outlived `up`"


def apply(c: Cluster, *objs: dict) -> None:
    c.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objs))


def get(c: Cluster, kind: str, name: str) -> dict:
    return json.loads(c.kubectl("get", kind, name, "-o", "json"))


def wait_for(c: Cluster, what: str, fn, timeout: float = 90):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            last = fn()
        except AssertionError:
            last = None
        if last:
            return last
        time.sleep(0.3)
    raise AssertionError(f"{what} never happened\n--- up log tail ---\n{c.tail(60)}")


def claim(name: str, size: str = "64Mi", cls: str | None = None, **spec) -> dict:
    s = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}, **spec}
    if cls is not None:
        s["storageClassName"] = cls
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": s}


def pod_on_claim(name: str, claim_name: str, script: str, read_only: bool = False) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                                     "command": ["sh", "-c", script],
                                     "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name,
                                                                            "readOnly": read_only}}]}}


def phase(c: Cluster, kind: str, name: str) -> str:
    return (get(c, kind, name).get("status") or {}).get("phase", "")


def event_reasons(c: Cluster, name: str) -> dict[str, str]:
    return {e["reason"]: e["message"] for e in c.events(name)}


def gone(c: Cluster, kind: str, name: str) -> bool:
    return "NotFound" in subprocess.run(["kubectl", "get", kind, name], capture_output=True, text=True,
                                        env=c.env).stderr


def test_default_class_is_local_path(cluster):
    sc = get(cluster, "storageclass", "local-path")
    assert sc["provisioner"] == "rancher.io/local-path"
    assert sc["volumeBindingMode"] == "WaitForFirstConsumer" and sc["reclaimPolicy"] == "Delete"
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert "local-path (default)" in cluster.kubectl("get", "storageclass")


def test_claim_binds_on_first_consumer_and_data_outlives_the_pod(cluster):
    c = cluster
    apply(c, claim("data1"))
    pvc = get(c, "pvc", "data1")
    assert pvc["spec"]["storageClassName"] == "local-path"  # the DefaultStorageClass admission
    assert "kubernetes.io/pvc-protection" in pvc["metadata"]["finalizers"]
    wait_for(c, "the WaitForFirstConsumer event", lambda: "WaitForFirstConsumer" in event_reasons(c, "data1"))
    assert phase(c, "pvc", "data1") == "Pending"
    assert event_reasons(c, "data1")["WaitForFirstConsumer"] == \
        "waiting for first consumer to be created before binding"

    apply(c, pod_on_claim("writer", "data1", "echo kept > /data/file && sleep 3600"))
    c.wait_pod("writer", _running, timeout=120)
    pvc = get(c, "pvc", "data1")
    assert pvc["status"]["phase"] == "Bound"
    assert pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] == c.node
    assert pvc["status"]["capacity"]["storage"] == "64Mi"
    assert pvc["status"]["accessModes"] == ["ReadWriteOnce"]
    pv = get(c, "pv", pvc["spec"]["volumeName"])
    assert pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == "rancher.io/local-path"
    assert pv["status"]["phase"] == "Bound" and pv["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"]
    term = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    hostname = get(c, "node", c.node)["metadata"]["labels"]["kubernetes.io/hostname"]
    assert term["key"] == "kubernetes.io/hostname" and term["values"] == [hostname]
    path = Path(pv["spec"]["hostPath"]["path"])
    assert path.parent == c.data_dir / "storage"
    assert path.name == f"{pv['metadata']['name']}_default_data1"
    wait_for(c, "the writer's file", lambda: (path / "file").exists())
    assert (path / "file").read_text() == "kept\n"
    reasons = event_reasons(c, "data1")
    assert reasons["ProvisioningSucceeded"] == f"Successfully provisioned volume {pv['metadata']['name']}"

    c.kubectl("delete", "pod", "writer", "--wait=true", "--timeout=60s")
    apply(c, pod_on_claim("reader", "data1", "cat /data/file"))
    c.wait_pod("reader", lambda p: p["status"].get("phase") == "Succeeded", timeout=120)
    assert c.kubectl("logs", "reader") == "kept\n"
    c.kubectl("delete", "pod", "reader", "--wait=true", "--timeout=60s")

    # reclaimPolicy Delete: the claim goes, then the volume object and its directory
    c.kubectl("delete", "pvc", "data1", "--wait=true", "--timeout=60s")
    wait_for(c, "the volume's deletion", lambda: gone(c, "pv", pv["metadata"]["name"]) and not path.exists())


def test_claim_in_use_waits_for_its_pod(cluster):
    c = cluster
    apply(c, claim("inuse"), pod_on_claim("holder", "inuse", "sleep 3600"))
    c.wait_pod("holder", _running, timeout=120)
    c.kubectl("delete", "pvc", "inuse", "--wait=false")
    time.sleep(2)
    pvc = get(c, "pvc", "inuse")  # kept by kubernetes.io/pvc-protection while the pod runs
    assert pvc["metadata"].get("deletionTimestamp") and pvc["status"]["phase"] == "Bound"
    assert "Terminating" in c.kubectl("get", "pvc", "inuse")
    c.kubectl("delete", "pod", "holder", "--wait=true", "--timeout=60s")
    wait_for(c, "the claim's removal", lambda: gone(c, "pvc", "inuse"))


def test_static_local_volume_retained(cluster, tmp_path):
    c = cluster
    disk = tmp_path / "disk1"
    disk.mkdir()
    (disk / "seed").write_text("from the admin\n")
    name = unique("pv").lower()
    hostname = get(c, "node", c.node)["metadata"]["labels"]["kubernetes.io/hostname"]
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
          "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                   "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "local-disks",
                   "local": {"path": str(disk)},
                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                       {"key": "kubernetes.io/hostname", "operator": "In", "values": [hostname]}]}]}}}}
    sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "local-disks"},
          "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}
    try:
        apply(c, sc, pv)
        wait_for(c, "the volume Available", lambda: phase(c, "pv", name) == "Available")
        apply(c, claim("local1", "512Mi", "local-disks"),
              pod_on_claim("local-user", "local1", "cat /data/seed && echo mine > /data/new"))
        done = c.wait_pod("local-user", lambda p: p["status"].get("phase") == "Succeeded", timeout=120)
        assert c.kubectl("logs", "local-user") == "from the admin\n"
        assert (disk / "new").read_text() == "mine\n"
        assert get(c, "pvc", "local1")["spec"]["volumeName"] == name
        grow = subprocess.run(["kubectl", "patch", "pvc", "local1", "-p",
                               '{"spec":{"resources":{"requests":{"storage":"1Gi"}}}}'],
                              capture_output=True, text=True, env=c.env)
        assert grow.returncode != 0
        assert "the storageclass that provisions the pvc must support resize" in grow.stderr
        # the kubelet's local plugin bind-mounted it under the pod, as kubelet does
        mp = c.data_dir / "kubelet" / "pods" / done["metadata"]["uid"] / "volumes" / \
            "kubernetes.io~local-volume" / name
        assert not Path("/proc/mounts").read_text().count(str(mp)) > 1
        c.kubectl("delete", "pod", "local-user", "--wait=true", "--timeout=60s")
        wait_for(c, "the bind mount gone", lambda: str(mp) not in Path("/proc/mounts").read_text())
        c.kubectl("delete", "pvc", "local1", "--wait=true", "--timeout=60s")
        wait_for(c, "the volume Released", lambda: phase(c, "pv", name) == "Released")
        assert (disk / "new").exists()  # Retain: the data stays for the admin
    finally:
        c.kubectl("delete", "pv", name, "--wait=true", "--timeout=60s", check=False)
        c.kubectl("delete", "storageclass", "local-disks", check=False)


def test_claims_that_cannot_bind_say_why(cluster):
    c = cluster
    apply(c, claim("noclass", cls=""))
    wait_for(c, "the FailedBinding event", lambda: "FailedBinding" in event_reasons(c, "noclass"))
    assert event_reasons(c, "noclass")["FailedBinding"] == \
        "no persistent volumes available for this claim and no storage class is set"
    apply(c, pod_on_claim("stuck", "noclass", "true"))

    def failed_scheduling():
        return event_reasons(c, "stuck").get("FailedScheduling")
    msg = wait_for(c, "FailedScheduling", failed_scheduling)
    assert "pod has unbound immediate PersistentVolumeClaims" in msg
    c.kubectl("delete", "pod", "stuck", "--wait=true", "--timeout=60s")
    c.kubectl("delete", "pvc", "noclass", "--wait=true", "--timeout=60s")
    bad = subprocess.run(["kubectl", "apply", "-f", "-"], input=yaml.safe_dump(
        {**claim("bad"), "spec": {"accessModes": ["ReadWriteSometimes"]}}), capture_output=True, text=True,
        env=c.env)
    assert bad.returncode != 0
    assert 'Unsupported value: "ReadWriteSometimes"' in bad.stderr and "spec.resources[storage]" in bad.stderr


def test_expansion_on_a_class_that_allows_it(cluster):
    c = cluster
    apply(c, claim("grow", "64Mi"), pod_on_claim("grower", "grow", "sleep 3600"))
    c.wait_pod("grower", _running, timeout=120)
    c.kubectl("patch", "pvc", "grow", "-p", '{"spec":{"resources":{"requests":{"storage":"128Mi"}}}}')

    def grown():
        pvc = get(c, "pvc", "grow")
        return pvc if pvc["status"].get("capacity", {}).get("storage") == "128Mi" else None
    pvc = wait_for(c, "the claim's new capacity", grown)
    assert pvc["status"]["allocatedResources"]["storage"] == "128Mi"
    assert get(c, "pv", pvc["spec"]["volumeName"])["spec"]["capacity"]["storage"] == "128Mi"
    assert "VolumeResizeSuccessful" in event_reasons(c, "grow")
    shrink = subprocess.run(["kubectl", "patch", "pvc", "grow", "-p",
                             '{"spec":{"resources":{"requests":{"storage":"32Mi"}}}}'],
                            capture_output=True, text=True, env=c.env)
    assert shrink.returncode != 0 and "can not be less than" in shrink.stderr
    c.kubectl("delete", "pod", "grower", "--wait=true", "--timeout=60s")
    c.kubectl("delete", "pvc", "grow", "--wait=true", "--timeout=60s")


# The seed's MySQL StatefulSet (001 §20) with a stand-in for mysqld and xtrabackup: ordinal 0 is the primary,
# the others replicas; an init container marks the role (init-mysql), another clones the data from the
# previous ordinal over TCP 3307 (clone-mysql, ncat from xtrabackup; here HTTP, busybox's httpd and wget,
# whose transfers end cleanly), every pod serves its data on 3307 and replicas keep following the primary
# (the xtrabackup sidecar and replication). Names resolve through the headless Service's per-pod records
# (busybox's own nslookup: a static busybox has no NSS).
RESOLVE = ("resolve() { nslookup \"$1.db.$NS.svc.cluster.local\" 2>/dev/null | "
           "awk '/^Address: /{print $2}' | tail -1; }; ")
INIT_ROLE = '[ "${HOSTNAME##*-}" = 0 ] && echo primary > /data/role || echo replica > /data/role'
FETCH = 'fetch() { timeout 5 wget -q -O "$2" "http://$1:3307/db" && [ -s "$2" ]; }; '
CLONE = (RESOLVE + FETCH + 'ord=${HOSTNAME##*-}; [ -s /data/db ] && exit 0; [ "$ord" = 0 ] && exit 0; '
         'for i in $(seq 60); do ip=$(resolve db-$((ord-1))); echo "try $i: db-$((ord-1)) is $ip"; '
         '[ "$i" = 1 ] && nslookup "db-$((ord-1)).db.$NS.svc.cluster.local" 2>&1 && cat /etc/resolv.conf; '
         '[ -n "$ip" ] && fetch "$ip" /data/db.part && mv /data/db.part /data/db && exit 0; sleep 1; done; '
         'exit 1')
SERVE = ('[ -s /data/db ] || echo "row1 written by $HOSTNAME" > /data/db; '
         'exec httpd -f -p 3307 -h /data')
REPLICATE = (RESOLVE + FETCH + '[ "${HOSTNAME##*-}" = 0 ] && exec sleep 3600; '
             'while true; do ip=$(resolve db-0); '
             '[ -n "$ip" ] && fetch "$ip" /data/db.new && mv /data/db.new /data/db; sleep 1; done')


def mysql_like() -> list[dict]:
    env = [{"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
    mount = [{"name": "data", "mountPath": "/data"}]

    def c(name: str, script: str, **extra) -> dict:
        return {"name": name, "image": BUSYBOX, "imagePullPolicy": "Never", "command": ["sh", "-c", script],
                "env": env, "volumeMounts": mount, **extra}
    ready = {"exec": {"command": ["test", "-s", "/data/db"]}, "periodSeconds": 1}
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db", "labels": {"app": "db"}},
           "spec": {"clusterIP": "None", "selector": {"app": "db"}, "ports": [{"name": "db", "port": 3307}]}}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
           "spec": {"serviceName": "db", "replicas": 3, "selector": {"matchLabels": {"app": "db"}},
                    "template": {"metadata": {"labels": {"app": "db"}}, "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "initContainers": [c("init-db", INIT_ROLE), c("clone-db", CLONE)],
                        "containers": [c("db", SERVE, readinessProbe=ready), c("replicate", REPLICATE)]}},
                    "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}}}]}}
    return [svc, sts]


def data_of(c: Cluster, ordinal: int) -> Path:
    pvc = get(c, "pvc", f"data-db-{ordinal}")
    return Path(get(c, "pv", pvc["spec"]["volumeName"])["spec"]["hostPath"]["path"])


def test_mysql_like_statefulset_clones_and_replicates(cluster):
    c = cluster
    apply(c, *mysql_like())
    try:
        for i in range(3):
            try:
                c.wait_pod(f"db-{i}", _running, timeout=180)
            except AssertionError as e:
                logs = c.kubectl("logs", f"db-{i}", "-c", "clone-db", check=False)
                raise AssertionError(f"{e}\n--- clone-db of db-{i} ---\n{logs}") from None
        dirs = [data_of(c, i) for i in range(3)]
        assert [(d / "role").read_text() for d in dirs] == ["primary\n", "replica\n", "replica\n"]
        # each replica cloned the primary's first row through the ordinal before it
        for d in dirs:
            assert (d / "db").read_text() == "row1 written by db-0\n"
        # a write on the primary reaches the replicas
        c.kubectl("exec", "db-0", "-c", "db", "--", "sh", "-c", "echo row2 >> /data/db")
        wait_for(c, "row2 on both replicas",
                 lambda: all((d / "db").read_text().endswith("row2\n") for d in dirs[1:]))
        # a replica deleted and re-created comes back on its claim with its data: no clone needed
        uid = get(c, "pod", "db-1")["metadata"]["uid"]
        c.kubectl("delete", "pod", "db-1", "--wait=true", "--timeout=60s")
        new = c.wait_pod("db-1", lambda p: p["metadata"]["uid"] != uid and _running(p), timeout=120)
        assert data_of(c, 1) == dirs[1]
        assert (dirs[1] / "db").read_text() == "row1 written by db-0\nrow2\n"
        assert new["status"]["initContainerStatuses"][1]["state"]["terminated"]["exitCode"] == 0
    finally:
        c.kubectl("delete", "statefulset", "db", "--wait=true", "--timeout=90s", check=False)
        c.kubectl("delete", "service", "db", check=False)
        c.kubectl("delete", "pods", "-l", "app=db", "--wait=true", "--timeout=90s", check=False)
        c.kubectl("delete", "pvc", "-l", "app=db", "--wait=true", "--timeout=90s", check=False)
