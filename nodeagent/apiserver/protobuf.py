"""Kubernetes protobuf bodies (`application/vnd.kubernetes.protobuf`), as kubectl >= 1.32's `create` sends
them.

The envelope is the 4-byte magic `k8s\\0` then a runtime.Unknown message (typeMeta=1, raw=2,
contentEncoding=3, contentType=4). `raw` is decoded with the small field maps below (from
k8s.io/api generated.proto) for the kinds kubectl's generators create: Namespace, ConfigMap,
Secret, Deployment (with its pod template), Service, ServiceAccount, RBAC roles and bindings,
PriorityClass, ResourceQuota. Anything else is Unsupported (415) with a message saying to use JSON.
"""

from __future__ import annotations

from typing import Any

MAGIC = b"k8s\x00"


class Unsupported(ValueError):
    pass


def _varint(b: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(b):
            raise Unsupported("truncated varint")
        c = b[i]
        i += 1
        result |= (c & 0x7F) << shift
        if not c & 0x80:
            return result, i
        shift += 7


def fields(b: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) for each field of one message."""
    out: list[tuple[int, int, Any]] = []
    i = 0
    while i < len(b):
        tag, i = _varint(b, i)
        num, wt = tag >> 3, tag & 7
        v: int | bytes
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise Unsupported(f"wire type {wt}")
        out.append((num, wt, v))
    return out


# Schema: message name -> {field number: (json name, type)}; type is "string", "int", "bool", "bytes",
# a message name, "map" (map<string,string>), "bmap" (map<string,bytes>), "time", "intstr",
# "quantities" (map<string,Quantity>), with a leading "[]" for repeated fields.
S: dict[str, dict[int, tuple[str, str]]] = {
    "ObjectMeta": {1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
                   5: ("uid", "string"), 6: ("resourceVersion", "string"), 7: ("generation", "int"),
                   11: ("labels", "map"), 12: ("annotations", "map"), 14: ("finalizers", "[]string")},
    "Namespace": {1: ("metadata", "ObjectMeta"), 2: ("spec", "NamespaceSpec")},
    "NamespaceSpec": {1: ("finalizers", "[]string")},
    "ConfigMap": {1: ("metadata", "ObjectMeta"), 2: ("data", "map"), 3: ("binaryData", "bmap"),
                  4: ("immutable", "bool")},
    "Secret": {1: ("metadata", "ObjectMeta"), 2: ("data", "bmap"), 3: ("type", "string"),
               4: ("stringData", "map"), 5: ("immutable", "bool")},
    "Deployment": {1: ("metadata", "ObjectMeta"), 2: ("spec", "DeploymentSpec")},
    "DeploymentSpec": {1: ("replicas", "int"), 2: ("selector", "LabelSelector"),
                       3: ("template", "PodTemplateSpec"), 4: ("strategy", "DeploymentStrategy"),
                       5: ("minReadySeconds", "int"), 6: ("revisionHistoryLimit", "int"),
                       7: ("paused", "bool"), 9: ("progressDeadlineSeconds", "int")},
    "DeploymentStrategy": {1: ("type", "string")},
    "LabelSelector": {1: ("matchLabels", "map"), 2: ("matchExpressions", "[]LabelSelectorRequirement")},
    "LabelSelectorRequirement": {1: ("key", "string"), 2: ("operator", "string"), 3: ("values", "[]string")},
    "PodTemplateSpec": {1: ("metadata", "ObjectMeta"), 2: ("spec", "PodSpec")},
    "PodSpec": {1: ("volumes", "[]Volume"), 2: ("containers", "[]Container"), 3: ("restartPolicy", "string"),
                4: ("terminationGracePeriodSeconds", "int"), 6: ("dnsPolicy", "string"),
                7: ("nodeSelector", "map"), 8: ("serviceAccountName", "string"), 10: ("nodeName", "string"),
                11: ("hostNetwork", "bool"), 19: ("schedulerName", "string"),
                20: ("initContainers", "[]Container")},
    "Volume": {1: ("name", "string")},
    "Container": {1: ("name", "string"), 2: ("image", "string"), 3: ("command", "[]string"),
                  4: ("args", "[]string"), 5: ("workingDir", "string"), 6: ("ports", "[]ContainerPort"),
                  7: ("env", "[]EnvVar"), 8: ("resources", "ResourceRequirements"),
                  13: ("terminationMessagePath", "string"), 14: ("imagePullPolicy", "string"),
                  16: ("stdin", "bool"), 18: ("tty", "bool")},
    "ContainerPort": {1: ("name", "string"), 2: ("hostPort", "int"), 3: ("containerPort", "int"),
                      4: ("protocol", "string"), 5: ("hostIP", "string")},
    "EnvVar": {1: ("name", "string"), 2: ("value", "string")},
    "ResourceRequirements": {1: ("limits", "quantities"), 2: ("requests", "quantities")},
    "Service": {1: ("metadata", "ObjectMeta"), 2: ("spec", "ServiceSpec")},
    "ServiceAccount": {1: ("metadata", "ObjectMeta")},
    "Role": {1: ("metadata", "ObjectMeta"), 2: ("rules", "[]PolicyRule")},
    "ClusterRole": {1: ("metadata", "ObjectMeta"), 2: ("rules", "[]PolicyRule")},
    "PolicyRule": {1: ("verbs", "[]string"), 2: ("apiGroups", "[]string"), 3: ("resources", "[]string"),
                   4: ("resourceNames", "[]string"), 5: ("nonResourceURLs", "[]string")},
    "RoleBinding": {1: ("metadata", "ObjectMeta"), 2: ("subjects", "[]Subject"), 3: ("roleRef", "RoleRef")},
    "ClusterRoleBinding": {1: ("metadata", "ObjectMeta"), 2: ("subjects", "[]Subject"),
                           3: ("roleRef", "RoleRef")},
    "Subject": {1: ("kind", "string"), 2: ("apiGroup", "string"), 3: ("name", "string"),
                4: ("namespace", "string")},
    "RoleRef": {1: ("apiGroup", "string"), 2: ("kind", "string"), 3: ("name", "string")},
    "PriorityClass": {1: ("metadata", "ObjectMeta"), 2: ("value", "int"), 3: ("globalDefault", "bool"),
                      4: ("description", "string"), 5: ("preemptionPolicy", "string")},
    "ResourceQuota": {1: ("metadata", "ObjectMeta"), 2: ("spec", "ResourceQuotaSpec")},
    "ResourceQuotaSpec": {1: ("hard", "quantities"), 2: ("scopes", "[]string")},
    "ServiceSpec": {1: ("ports", "[]ServicePort"), 2: ("selector", "map"), 3: ("clusterIP", "string"),
                    4: ("type", "string"), 10: ("externalName", "string")},
    "ServicePort": {1: ("name", "string"), 2: ("protocol", "string"), 3: ("port", "int"),
                    4: ("targetPort", "intstr"), 5: ("nodePort", "int")},
}


def _map(entries: list[bytes], binary: bool) -> dict[str, Any]:
    import base64

    out: dict[str, Any] = {}
    for e in entries:
        k = v = b""
        for num, _, val in fields(e):
            if num == 1:
                k = val
            elif num == 2:
                v = val
        out[k.decode()] = base64.b64encode(v).decode() if binary else v.decode()
    return out


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def message(b: bytes, name: str) -> dict[str, Any]:
    schema = S[name]
    out: dict[str, Any] = {}
    maps: dict[str, tuple[str, list[bytes]]] = {}
    for num, _, val in fields(b):
        if num not in schema:
            continue
        key, typ = schema[num]
        rep = typ.startswith("[]")
        base = typ[2:] if rep else typ
        if base in ("map", "bmap", "quantities"):
            maps.setdefault(key, (base, []))[1].append(val)
            continue
        if base == "string":
            v: Any = val.decode()
        elif base == "int":
            v = _signed(val)
        elif base == "bool":
            v = bool(val)
        elif base == "bytes":
            v = val
        elif base == "intstr":
            d = {n: x for n, _, x in fields(val)}
            v = d.get(3, b"").decode() if d.get(1) == 1 else _signed(d.get(2, 0))
        else:
            v = message(val, base)
        if rep:
            out.setdefault(key, []).append(v)
        elif v != "":  # Go encodes empty strings that JSON (omitempty) would leave out
            out[key] = v
    for key, (typ, entries) in maps.items():
        if typ == "quantities":
            q = {}
            for e in entries:
                kv = {n: x for n, _, x in fields(e)}
                inner = {n: x for n, _, x in fields(kv.get(2, b""))}
                q[kv.get(1, b"").decode()] = inner.get(1, b"").decode()
            out[key] = q
        else:
            out[key] = _map(entries, typ == "bmap")
    return out


def decode(data: bytes, resource: Any) -> dict[str, Any]:
    if not data.startswith(MAGIC):
        raise Unsupported("missing the k8s protobuf magic prefix")
    env = {n: v for n, _, v in fields(data[4:])}
    tm = {n: v.decode() for n, _, v in fields(env.get(1, b""))}
    api_version, kind = tm.get(1, ""), tm.get(2, "")
    if env.get(3):
        raise Unsupported(f"content encoding {env[3]!r}")
    if kind not in S or kind != resource.kind:
        raise Unsupported(f"protobuf decoding of {kind or 'this kind'} is not implemented; use JSON "
                          "(e.g. kubectl create -f <file>)")
    obj = message(env.get(2, b""), kind)
    obj["apiVersion"], obj["kind"] = api_version, kind
    return obj
