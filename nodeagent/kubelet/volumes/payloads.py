"""What configMap, secret, downwardAPI and projected volumes contain (the kubelet plugins' MakePayload).

Pure: objects come in as dicts (ConfigMap/Secret as the apiserver stores them, `data` of a Secret in
base64), payloads go out as {path: FileProjection} for the AtomicWriter.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Callable, Mapping
from typing import Any

from nodeagent.api.qos import container_requests
from nodeagent.api.quantity import parse_quantity
from nodeagent.kubelet.volumes.atomic_writer import FileProjection

DEFAULT_MODE = 0o644

Getter = Callable[[str, str], "Mapping[str, Any] | None"]  # (namespace, name) → object or None when not found
TokenGetter = Callable[[Mapping[str, Any], str, int], str]  # (pod, audience, expirationSeconds) → token


class VolumeSourceError(Exception):
    """Setting up a volume failed; the message is what follows `MountVolume.SetUp failed for volume "x" :
    `."""


def _mode(item: Mapping[str, Any], default: int) -> int:
    m = item.get("mode")
    return int(m) if m is not None else default


def configmap_payload(source: Mapping[str, Any], cm: Mapping[str, Any] | None,
                      default_mode: int | None = None) -> dict[str, FileProjection]:
    """configMap (or a projected configMap source): all keys, or the listed items."""
    optional = bool(source.get("optional"))
    dm = default_mode if default_mode is not None else int(source.get("defaultMode", DEFAULT_MODE))
    if cm is None:
        if optional:
            return {}
        raise VolumeSourceError(f'configmap "{source.get("name")}" not found')
    data = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
    data.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    items = source.get("items") or []
    if not items:
        return {k: FileProjection(v, dm) for k, v in data.items()}
    out = {}
    for item in items:
        if item["key"] not in data:
            if optional:
                continue
            raise VolumeSourceError(f"configmap references non-existent config key: {item['key']}")
        out[item["path"]] = FileProjection(data[item["key"]], _mode(item, dm))
    return out


def secret_payload(source: Mapping[str, Any], secret: Mapping[str, Any] | None,
                   default_mode: int | None = None) -> dict[str, FileProjection]:
    """secret (or a projected secret source); the volume's field is `secretName`, the projection's `name`."""
    optional = bool(source.get("optional"))
    name = source.get("secretName") or source.get("name")
    dm = default_mode if default_mode is not None else int(source.get("defaultMode", DEFAULT_MODE))
    if secret is None:
        if optional:
            return {}
        raise VolumeSourceError(f'secret "{name}" not found')
    data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    data.update({k: v.encode() for k, v in (secret.get("stringData") or {}).items()})
    items = source.get("items") or []
    if not items:
        return {k: FileProjection(v, dm) for k, v in data.items()}
    out = {}
    for item in items:
        if item["key"] not in data:
            if optional:
                continue
            raise VolumeSourceError(f"references non-existent secret key: {item['key']}")
        out[item["path"]] = FileProjection(data[item["key"]], _mode(item, dm))
    return out


# -- downward API ------------------------------------------------------------------------------------


def go_quote(s: str) -> str:
    """Go's %q (strconv.Quote) for the label/annotation file format."""
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif not ch.isprintable():
            out.append(f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def format_map(m: Mapping[str, str]) -> str:
    """fieldpath.FormatMap: `key="value"` lines, sorted by key, no trailing newline."""
    return "\n".join(f"{k}={go_quote(str(m[k]))}" for k in sorted(m))


def _subscript(path: str, prefix: str) -> str | None:
    # metadata.labels['app'] → app
    if path.startswith(prefix + "['") and path.endswith("']"):
        return path[len(prefix) + 2:-2]
    return None


def field_ref_value(pod: Mapping[str, Any], field_path: str) -> str:
    """ExtractFieldPathAsString for the fields a downward API volume may use (and a few env-only ones)."""
    meta = pod.get("metadata") or {}
    for prefix, key in (("metadata.annotations", "annotations"), ("metadata.labels", "labels")):
        sub = _subscript(field_path, prefix)
        if sub is not None:
            return str((meta.get(key) or {}).get(sub, ""))
    simple = {"metadata.name": meta.get("name", ""), "metadata.namespace": meta.get("namespace", ""),
              "metadata.uid": meta.get("uid", ""),
              "metadata.annotations": format_map(meta.get("annotations") or {}),
              "metadata.labels": format_map(meta.get("labels") or {}),
              "spec.nodeName": (pod.get("spec") or {}).get("nodeName", ""),
              "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName", ""),
              "status.podIP": (pod.get("status") or {}).get("podIP", ""),
              "status.hostIP": (pod.get("status") or {}).get("hostIP", "")}
    if field_path not in simple:
        raise VolumeSourceError(f"unsupported fieldPath: {field_path}")
    return str(simple[field_path])


def resource_field_value(pod: Mapping[str, Any], ref: Mapping[str, Any],
                         node_allocatable: Mapping[str, Any] | None = None) -> str:
    """ExtractContainerResourceValue: limits fall back to node allocatable; value / divisor rounded up."""
    name = ref.get("containerName")
    spec = pod.get("spec") or {}
    container = next((c for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
                      if c.get("name") == name), None)
    if container is None:
        raise VolumeSourceError(f"container {name!r} not found in pod")
    resource = ref.get("resource", "")
    kind, _, res = resource.partition(".")
    if kind not in ("limits", "requests") or res not in ("cpu", "memory", "ephemeral-storage"):
        raise VolumeSourceError(f"unsupported container resource : {resource}")
    values = container_requests(container) if kind == "requests" else dict(
        (container.get("resources") or {}).get("limits") or {})
    if kind == "limits" and res not in values and node_allocatable and res in node_allocatable:
        values[res] = node_allocatable[res]
    value = parse_quantity(values.get(res, 0))
    divisor = parse_quantity(ref.get("divisor") or "1")
    if divisor <= 0:
        raise VolumeSourceError(f"invalid divisor {ref.get('divisor')!r}")
    if res == "cpu":
        return str(math.ceil(math.ceil(value * 1000) / math.ceil(divisor * 1000)))
    return str(math.ceil(math.ceil(value) / math.ceil(divisor)))


def downward_api_payload(items: list[Mapping[str, Any]], pod: Mapping[str, Any], default_mode: int,
                         node_allocatable: Mapping[str, Any] | None = None) -> dict[str, FileProjection]:
    out = {}
    for item in items:
        if "fieldRef" in item:
            value = field_ref_value(pod, item["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in item:
            value = resource_field_value(pod, item["resourceFieldRef"], node_allocatable)
        else:
            raise VolumeSourceError(f"downwardAPI item {item.get('path')!r} has neither fieldRef nor "
                                    "resourceFieldRef")
        out[item["path"]] = FileProjection(value.encode(), _mode(item, default_mode))
    return out


# -- projected ------------------------------------------------------------------------------------------


def projected_payload(source: Mapping[str, Any], pod: Mapping[str, Any], get_configmap: Getter | None,
                      get_secret: Getter | None, get_token: TokenGetter | None = None,
                      node_allocatable: Mapping[str, Any] | None = None) -> dict[str, FileProjection]:
    """All sources combined into one directory (later sources win on a path clash, as kubelet's map does)."""
    dm = int(source.get("defaultMode", DEFAULT_MODE))
    ns = (pod.get("metadata") or {}).get("namespace", "default")
    out: dict[str, FileProjection] = {}
    for s in source.get("sources") or []:
        if "configMap" in s:
            src = s["configMap"]
            obj = get_configmap(ns, src["name"]) if get_configmap else None
            out.update(configmap_payload(src, obj, dm))
        elif "secret" in s:
            src = s["secret"]
            obj = get_secret(ns, src["name"]) if get_secret else None
            out.update(secret_payload(src, obj, dm))
        elif "downwardAPI" in s:
            out.update(downward_api_payload(s["downwardAPI"].get("items") or [], pod, dm, node_allocatable))
        elif "serviceAccountToken" in s:
            src = s["serviceAccountToken"]
            if get_token is None:
                raise VolumeSourceError("serviceAccountToken projection is unimplemented: no token "
                                        "issuer configured")
            token = get_token(pod, src.get("audience", ""), int(src.get("expirationSeconds", 3600)))
            out[src["path"]] = FileProjection(token.encode(), dm)
        else:
            kinds = ",".join(sorted(s)) or "empty"
            raise VolumeSourceError(f"projected source {kinds} is unimplemented")
    return out
