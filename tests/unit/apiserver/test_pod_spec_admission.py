"""Pod-spec fields refused or completed at create as kube-apiserver does: field validation (422 with
causes), RuntimeClass admission (403), ephemeral containers only through their subresource."""

import pytest

from nodeagent.api.resources import builtin
from nodeagent.apiserver.errors import ApiError
from tests.unit.apiserver import test_registry

PODS = builtin("", "v1", "pods")
RC = builtin("node.k8s.io", "v1", "runtimeclasses")
DEPLOY = builtin("apps", "v1", "deployments")
reg = test_registry.reg  # a registry over the memory store with namespace "d" (the fixture, by its name)


def pod(c=None, **spec):
    container = {"name": "c", "image": "busybox", **(c or {})}
    return {"metadata": {"name": "p"}, "spec": {"containers": [container], **spec}}


async def _refused(reg, obj, res=PODS):
    with pytest.raises(ApiError) as e:
        await reg.create(res, "d", obj)
    return e.value


# (pod, the cause's field, its message): kube-apiserver's own wording.
CASES = [
    (pod(securityContext={"runAsUser": -1}), "spec.securityContext.runAsUser",
     "Invalid value: -1: must be between 0 and 2147483647, inclusive"),
    (pod(securityContext={"fsGroupChangePolicy": "Sometimes"}), "spec.securityContext.fsGroupChangePolicy",
     'Unsupported value: "Sometimes": supported values: "OnRootMismatch", "Always"'),
    (pod(securityContext={"supplementalGroupsPolicy": "Loose"}),
     "spec.securityContext.supplementalGroupsPolicy",
     'Unsupported value: "Loose": supported values: "Merge", "Strict"'),
    (pod(securityContext={"seccompProfile": {"type": "Localhost"}}),
     "spec.securityContext.seccompProfile.localhostProfile",
     "Required value: must be set when seccomp type is Localhost"),
    (pod({"securityContext": {"appArmorProfile": {"type": "Bogus"}}}),
     "spec.containers[0].securityContext.appArmorProfile.type",
     'Unsupported value: "Bogus": supported values: "Localhost", "RuntimeDefault", "Unconfined"'),
    (pod({"securityContext": {"privileged": True, "allowPrivilegeEscalation": False}}),
     "spec.containers[0].securityContext",
     "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"),
    (pod(securityContext={"sysctls": [{"name": "Net.Bad!", "value": "1"}]}),
     "spec.securityContext.sysctls[0].name", "must have at most 253 characters and match regex"),
    (pod(os={"name": "plan9"}), "spec.os.name",
     'Unsupported value: "plan9": supported values: "linux", "windows"'),
    (pod(os={"name": "windows"}, securityContext={"runAsUser": 5}), "spec.securityContext.runAsUser",
     "Forbidden: may not be set for a windows pod"),
    (pod(hostAliases=[{"ip": "not-an-ip", "hostnames": ["a"]}]), "spec.hostAliases[0].ip",
     'Invalid value: "not-an-ip": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)'),
    (pod(dnsPolicy="None"), "spec.dnsConfig",
     "Required value: must provide `dnsConfig` when `dnsPolicy` is None"),
    (pod(dnsPolicy="Sometimes"), "spec.dnsPolicy", 'Unsupported value: "Sometimes"'),
    (pod(dnsConfig={"nameservers": ["1.1.1.1", "1.0.0.1", "8.8.8.8", "8.8.4.4"]}),
     "spec.dnsConfig.nameservers", "must not have more than 3 nameservers"),
    (pod(activeDeadlineSeconds=0), "spec.activeDeadlineSeconds",
     "Invalid value: 0: must be between 1 and 2147483647, inclusive"),
    (pod(hostPID=True, shareProcessNamespace=True), "spec.securityContext.shareProcessNamespace",
     "ShareProcessNamespace and HostPID cannot both be enabled"),
    (pod({"ports": [{"containerPort": 80, "hostPort": 8080}]}, hostNetwork=True),
     "spec.containers[0].ports[0].hostPort", "must match `containerPort` when `hostNetwork` is true"),
    (pod({"terminationMessagePolicy": "Always"}), "spec.containers[0].terminationMessagePolicy",
     'Unsupported value: "Always": supported values: "File", "FallbackToLogsOnError"'),
    (pod({"restartPolicy": "Always"}), "spec.containers[0].restartPolicy",
     "Forbidden: may not be set for non-init containers"),
    (pod(initContainers=[{"name": "i", "image": "busybox", "restartPolicy": "OnFailure"}]),
     "spec.initContainers[0].restartPolicy", 'Unsupported value: "OnFailure": supported values: "Always"'),
    (pod(initContainers=[{"name": "i", "image": "busybox",
                          "readinessProbe": {"exec": {"command": ["true"]}}}]),
     "spec.initContainers[0].readinessProbe",
     "Forbidden: may not be set for init containers without restartPolicy=Always"),
    (pod({"lifecycle": {"preStop": {}}}), "spec.containers[0].lifecycle.preStop",
     "Required value: must specify a handler type"),
    (pod({"lifecycle": {"preStop": {"sleep": {"seconds": 60}}}}),
     "spec.containers[0].lifecycle.preStop.sleep.seconds",
     "must be non-negative and less than terminationGracePeriodSeconds (30)"),
    (pod(topologySpreadConstraints=[{"maxSkew": 0, "topologyKey": "zone",
                                     "whenUnsatisfiable": "DoNotSchedule"}]),
     "spec.topologySpreadConstraints[0].maxSkew", "Invalid value: 0: must be greater than zero"),
    (pod(readinessGates=[{"conditionType": "bad type!"}]), "spec.readinessGates[0].conditionType",
     'Invalid value: "bad type!"'),
    (pod(ephemeralContainers=[{"name": "dbg", "image": "busybox"}]), "spec.ephemeralContainers",
     "Forbidden: cannot be set on create"),
    (pod({"volumeMounts": [{"name": "v", "mountPath": "/v", "mountPropagation": "Bidirectional"}]},
         volumes=[{"name": "v", "emptyDir": {}}]), "spec.containers[0].volumeMounts.mountPropagation",
     "Forbidden: Bidirectional mount propagation is available only to privileged containers"),
    (pod({"volumeMounts": [{"name": "v", "mountPath": "/v", "recursiveReadOnly": "Enabled"}]},
         volumes=[{"name": "v", "emptyDir": {}}]), "spec.containers[0].volumeMounts[0].recursiveReadOnly",
     "Forbidden: may only be specified when readOnly is true"),
    (pod({"securityContext": {"procMount": "Unmasked"}}), "spec.containers[0].securityContext.procMount",
     'Invalid value: "Unmasked": `hostUsers` must be false to use `Unmasked`'),
    (pod({"volumeDevices": [{"name": "v", "devicePath": "/dev/xvda"}]},
         volumes=[{"name": "v", "emptyDir": {}}]),
     "spec.containers[0].volumeDevices[0].name",
     "can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode"),
    (pod(volumes=[{"name": "v", "flexVolume": {"options": {"a": "b"}}}]), "spec.volumes[0].flexVolume.driver",
     "Required value"),
    (pod(schedulingGates=[{"name": "example.com/wait"}, {"name": "example.com/wait"}]),
     "spec.schedulingGates[1].name", 'Duplicate value: "example.com/wait"'),
    (pod(schedulingGates=[{"name": "a"}], nodeName="n1"), "spec.nodeName",
     "Forbidden: cannot be set until all schedulingGates have been cleared"),
    (pod({"livenessProbe": {"exec": {"command": ["true"]}, "successThreshold": 2}}),
     "spec.containers[0].livenessProbe.successThreshold", "Invalid value: 2: must be 1"),
    (pod({"readinessProbe": {"periodSeconds": 5}}), "spec.containers[0].readinessProbe",
     "Required value: must specify a handler type"),
    (pod({"startupProbe": {"tcpSocket": {"port": 80}, "failureThreshold": -1}}),
     "spec.containers[0].startupProbe.failureThreshold",
     "Invalid value: -1: must be greater than or equal to 0"),
]


@pytest.mark.parametrize(("obj", "field", "message"), CASES, ids=[c[1] for c in CASES])
async def test_invalid_fields_are_refused_with_their_cause(reg, obj, field, message):
    e = await _refused(reg, obj)
    assert e.code == 422 and e.reason == "Invalid"
    causes = [(c["field"], c["message"]) for c in e.details["causes"]]
    assert any(f == field and message in m for f, m in causes), causes
    with pytest.raises(ApiError):
        await reg.get(PODS, "d", "p")  # nothing stored


async def test_templates_are_validated_alike(reg):
    tpl = {"metadata": {"labels": {"a": "b"}},
           "spec": {"containers": [{"name": "c", "image": "i"}], "hostAliases": [{"ip": "x"}]}}
    e = await _refused(reg, {"metadata": {"name": "w"}, "spec": {"selector": {"matchLabels": {"a": "b"}},
                                                                 "template": tpl}}, DEPLOY)
    assert "spec.template.spec.hostAliases[0].ip" in [c["field"] for c in e.details["causes"]]


async def test_valid_fields_are_accepted(reg):
    o = await reg.create(PODS, "d", pod(
        {"securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": False,
                             "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}},
         "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
         "terminationMessagePolicy": "FallbackToLogsOnError"},
        os={"name": "linux"}, hostAliases=[{"ip": "10.1.2.3", "hostnames": ["foo.remote"]}],
        dnsPolicy="None", dnsConfig={"nameservers": ["1.1.1.1"]}, activeDeadlineSeconds=30,
        securityContext={"fsGroup": 2000, "fsGroupChangePolicy": "OnRootMismatch",
                         "sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65000"}]},
        initContainers=[{"name": "side", "image": "busybox", "restartPolicy": "Always",
                         "readinessProbe": {"exec": {"command": ["true"]}}}],
        topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                                    "labelSelector": {"matchLabels": {"a": "b"}}}],
        readinessGates=[{"conditionType": "example.com/ready"}]))
    assert o["metadata"]["uid"]


async def test_runtime_class_admission(reg):
    e = await _refused(reg, pod(runtimeClassName="gvisor"))
    assert e.code == 403
    assert e.message == 'pods "p" is forbidden: pod rejected: RuntimeClass "gvisor" not found'
    e = await _refused(reg, pod(overhead={"cpu": "100m"}))
    assert e.message.endswith(
        "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead")
    await reg.create(RC, None, {"metadata": {"name": "fast"}, "handler": "runc",
                                "overhead": {"podFixed": {"cpu": "250m", "memory": "120Mi"}},
                                "scheduling": {"nodeSelector": {"pool": "fast"},
                                               "tolerations": [{"key": "fast", "operator": "Exists"}]}})
    o = await reg.create(PODS, "d", pod(runtimeClassName="fast"))
    assert o["spec"]["overhead"] == {"cpu": "250m", "memory": "120Mi"}
    assert o["spec"]["nodeSelector"] == {"pool": "fast"}
    assert {"key": "fast", "operator": "Exists"} in o["spec"]["tolerations"]
    bad = pod(runtimeClassName="fast", overhead={"cpu": "1"})
    bad["metadata"]["name"] = "q"
    e = await _refused(reg, bad)
    assert e.message.endswith(
        "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead")
    clash = pod(runtimeClassName="fast", nodeSelector={"pool": "slow"})
    clash["metadata"]["name"] = "r"
    e = await _refused(reg, clash)
    assert "conflict: runtimeClass.scheduling.nodeSelector[pool] = fast; pod.spec.nodeSelector[pool] = slow" \
        in e.message


def _debugger(name="dbg", **kw):
    return {"name": name, "image": "busybox", "stdin": True, "tty": True, **kw}


async def test_ephemeral_containers_are_added_through_their_subresource_only(reg):
    await reg.create(PODS, "d", pod())
    cur = await reg.get(PODS, "d", "p")
    cur["spec"]["ephemeralContainers"] = [_debugger(targetContainerName="c")]
    e = await _refused_update(reg, cur, "")  # the main resource may not change them
    assert e.code == 422
    o, _ = await reg.update(PODS, "d", "p", cur, "ephemeralcontainers")
    (ec,) = o["spec"]["ephemeralContainers"]
    assert ec["targetContainerName"] == "c" and ec["terminationMessagePolicy"] == "File"  # defaulted
    changed = await reg.get(PODS, "d", "p")
    changed["spec"]["ephemeralContainers"][0]["image"] = "other"
    e = await _refused_update(reg, changed, "ephemeralcontainers")
    assert [c["message"] for c in e.details["causes"]] == [
        'Forbidden: existing ephemeral containers "dbg" may not be changed\n']
    removed = await reg.get(PODS, "d", "p")
    removed["spec"]["ephemeralContainers"] = []
    e = await _refused_update(reg, removed, "ephemeralcontainers")
    assert "may not be removed" in e.details["causes"][0]["message"]
    other = await reg.get(PODS, "d", "p")
    other["spec"]["containers"][0]["image"] = "changed"  # only ephemeral containers come from the body
    other["spec"]["ephemeralContainers"].append(_debugger("dbg2"))
    o, _ = await reg.update(PODS, "d", "p", other, "ephemeralcontainers")
    assert o["spec"]["containers"][0]["image"] == "busybox" and len(o["spec"]["ephemeralContainers"]) == 2


@pytest.mark.parametrize(("ec", "field", "message"), [
    (_debugger(targetContainerName="nope"), "spec.ephemeralContainers[0].targetContainerName",
     'Not found: "nope"'),
    (_debugger(ports=[{"containerPort": 80}]), "spec.ephemeralContainers[0].ports",
     "Forbidden: cannot be set for an Ephemeral Container"),
    (_debugger(readinessProbe={"exec": {"command": ["true"]}}), "spec.ephemeralContainers[0].readinessProbe",
     "Forbidden: cannot be set for an Ephemeral Container"),
    (_debugger("c"), "spec.ephemeralContainers[0].name", 'Duplicate value: "c"'),
    ({"name": "dbg"}, "spec.ephemeralContainers[0].image", "Required value"),
])
async def test_invalid_ephemeral_containers(reg, ec, field, message):
    await reg.create(PODS, "d", pod())
    cur = await reg.get(PODS, "d", "p")
    cur["spec"]["ephemeralContainers"] = [ec]
    e = await _refused_update(reg, cur, "ephemeralcontainers")
    assert (field, message) in [(c["field"], c["message"]) for c in e.details["causes"]]


async def _refused_update(reg, obj, sub):
    with pytest.raises(ApiError) as e:
        await reg.update(PODS, "d", "p", obj, sub)
    return e.value


async def test_fields_of_disabled_features_are_dropped_as_kube_apiserver_does(reg):
    resize = [{"resourceName": "cpu", "restartPolicy": "NotRequired"}]
    o = await reg.create(PODS, "d", pod({"resizePolicy": resize, "resources": {"claims": [{"name": "gpu"}]}},
                                        resourceClaims=[{"name": "gpu", "resourceClaimName": "x"}],
                                        resources={"limits": {"cpu": "1"}}))
    spec = o["spec"]
    assert "resourceClaims" not in spec and "resources" not in spec
    assert "resizePolicy" not in spec["containers"][0] and "claims" not in spec["containers"][0]["resources"]


async def test_updates_may_only_shorten_the_deadline_and_remove_gates(reg):
    gates = [{"name": "g1"}, {"name": "g2"}]
    await reg.create(PODS, "d", pod(activeDeadlineSeconds=60, schedulingGates=gates))
    cur = await reg.get(PODS, "d", "p")
    cur["spec"]["activeDeadlineSeconds"] = 120
    e = await _refused_update(reg, cur, "")
    assert e.details["causes"][0]["message"] == \
        "Invalid value: 120: must be less than or equal to previous value"
    cur["spec"]["activeDeadlineSeconds"] = 30
    cur["spec"]["schedulingGates"] = [{"name": "g1"}, {"name": "g3"}]
    e = await _refused_update(reg, cur, "")
    assert e.details["causes"][0]["message"] == \
        "Forbidden: only deletion is allowed, but found new scheduling gate"
    cur["spec"]["schedulingGates"] = [{"name": "g2"}]
    o, _ = await reg.update(PODS, "d", "p", cur)
    assert o["spec"]["activeDeadlineSeconds"] == 30
    assert o["spec"]["schedulingGates"] == [{"name": "g2"}]
