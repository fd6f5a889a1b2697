"""Static pods from a manifest directory (kubelet pkg/kubelet/config/file.go, common.go, mirror_client.go).

Every regular, non-hidden file in the directory is read as YAML or JSON: one Pod, several `---`
documents, or a PodList. Each pod gets what the kubelet gives a static pod: a UID hashed from its
content, the node and the file; `name-<nodeName>`; namespace "default" when unset; spec.nodeName; the
`kubernetes.io/config.{hash,source,seen}` annotations; a NoExecute toleration. The directory is
re-read when a file's mtime, size or inode changes (polled; the kubelet also re-lists every 20 s).
`mirror_pod` builds the API object that shows a static pod in the apiserver.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import inspect
import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from nodeagent.clock import REAL_CLOCK, Clock

log = logging.getLogger(__name__)

CONFIG_SOURCE = "kubernetes.io/config.source"
CONFIG_HASH = "kubernetes.io/config.hash"
CONFIG_SEEN = "kubernetes.io/config.seen"
CONFIG_MIRROR = "kubernetes.io/config.mirror"
FILE_SOURCE = "file"
HTTP_SOURCE = "http"
DEFAULT_HTTP_PERIOD = 20.0  # kubelet's --http-check-frequency
DEFAULT_PERIOD = 2.0


class ManifestError(ValueError):
    pass


def _default_container(c: dict[str, Any]) -> None:
    image = c.get("image", "")
    tag = image.rsplit("/", 1)[-1]
    if "imagePullPolicy" not in c:
        c["imagePullPolicy"] = "Always" if "@" not in tag and (":" not in tag or tag.endswith(":latest")) \
            else "IfNotPresent"
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("resources", {})
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")


def apply_api_defaults(pod: dict[str, Any]) -> dict[str, Any]:
    """The API defaults the kubelet's decoder applies to a manifest (the subset that changes behaviour)."""
    spec = pod.setdefault("spec", {})
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        _default_container(c)
    return pod


def _validate(pod: Mapping[str, Any], where: str) -> None:
    if pod.get("kind") != "Pod" or pod.get("apiVersion") not in ("v1", None):
        raise ManifestError(f"{where}: not a v1 Pod (kind={pod.get('kind')!r}, "
                            f"apiVersion={pod.get('apiVersion')!r})")
    if not (pod.get("metadata") or {}).get("name"):
        raise ManifestError(f"{where}: metadata.name is required")
    if not (pod.get("spec") or {}).get("containers"):
        raise ManifestError(f"{where}: spec.containers is required")


def decode_manifest(text: str, where: str = "<manifest>") -> list[dict[str, Any]]:
    """Pods in a manifest: JSON or YAML, one or several documents, Pod or PodList."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise ManifestError(f"{where}: {e}") from None
    pods = []
    for d in docs:
        if not isinstance(d, dict):
            raise ManifestError(f"{where}: a document is not an object")
        if d.get("kind") == "PodList":
            items = d.get("items") or []
        else:
            items = [d]
        for p in items:
            p.setdefault("apiVersion", "v1")
            p.setdefault("kind", "Pod")
            _validate(p, where)
            pods.append(p)
    return pods


def static_pod_uid(pod: Mapping[str, Any], node_name: str, source: str, kind: str = FILE_SOURCE) -> str:
    """md5 over the pod's canonical JSON, then "host:<node>" and "file:<path>" or "url:<url>" (kubelet
    applyDefaults)."""
    h = hashlib.md5(usedforsecurity=False)
    h.update(json.dumps(pod, sort_keys=True, separators=(",", ":")).encode())
    h.update(f"host:{node_name}".encode())
    h.update(f"{'url' if kind == HTTP_SOURCE else 'file'}:{source}".encode())
    return h.hexdigest()


def apply_static_defaults(pod: dict[str, Any], node_name: str, source: str, seen: str | None = None,
                          kind: str = FILE_SOURCE) -> dict[str, Any]:
    apply_api_defaults(pod)
    meta = pod.setdefault("metadata", {})
    if not meta.get("uid"):
        meta["uid"] = static_pod_uid(pod, node_name, source, kind)
    meta["name"] = f"{meta['name']}-{node_name}"
    if not meta.get("namespace"):
        meta["namespace"] = "default"
    pod["spec"]["nodeName"] = node_name
    ann = meta.get("annotations") or {}
    meta["annotations"] = ann
    ann[CONFIG_HASH] = meta["uid"]
    ann[CONFIG_SOURCE] = kind
    if seen:
        ann.setdefault(CONFIG_SEEN, seen)
    tolerations = pod["spec"].setdefault("tolerations", [])
    tol = {"operator": "Exists", "effect": "NoExecute"}
    if tol not in tolerations:
        tolerations.append(tol)
    pod["status"] = {"phase": "Pending"}
    return pod


def read_manifest_file(path: Path, node_name: str, seen: str | None = None) -> list[dict[str, Any]]:
    pods = decode_manifest(path.read_text(), str(path))
    out = []
    for i, p in enumerate(pods):
        source = str(path) if i == 0 else f"{path}#{i}"
        out.append(apply_static_defaults(p, node_name, source, seen))
    return out


def _snapshot(directory: Path) -> dict[str, tuple[int, int, int]]:
    out = {}
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return {}
    for e in entries:
        if e.name.startswith("."):
            continue
        try:
            st = e.stat()
        except FileNotFoundError:
            continue
        if e.is_file():
            out[e.name] = (st.st_mtime_ns, st.st_size, st.st_ino)
    return out


OnUpdate = Callable[[list[dict[str, Any]]], "Awaitable[None] | None"]


class StaticPodSource:
    """The file source: `poll()` returns the full set of pods when the directory changed, else None."""

    def __init__(self, directory: str | os.PathLike, node_name: str, clock: Clock | None = None,
                 period: float = DEFAULT_PERIOD) -> None:
        self.directory = Path(directory)
        self.node_name = node_name
        self.clock = clock or REAL_CLOCK
        self.period = period
        self._snap: dict[str, tuple[int, int, int]] | None = None
        self._seen: dict[str, str] = {}  # uid → first-seen timestamp
        self.errors: dict[str, str] = {}  # file → why it was skipped

    def read(self) -> list[dict[str, Any]]:
        """Every pod in the directory now (files in name order; a bad file is skipped and recorded)."""
        pods: list[dict[str, Any]] = []
        self.errors = {}
        for name in sorted(_snapshot(self.directory)):
            path = self.directory / name
            try:
                file_pods = read_manifest_file(path, self.node_name)
            except (OSError, ManifestError, UnicodeDecodeError) as e:
                self.errors[name] = str(e)
                log.warning("static pod manifest %s skipped: %s", path, e)
                continue
            pods.extend(file_pods)
        seen_now = {}
        for p in pods:
            uid = p["metadata"]["uid"]
            stamp = self._seen.get(uid) or _seen_stamp(self.clock.now())
            seen_now[uid] = stamp
            p["metadata"]["annotations"].setdefault(CONFIG_SEEN, stamp)
        self._seen = seen_now
        return pods

    def poll(self) -> list[dict[str, Any]] | None:
        snap = _snapshot(self.directory)
        if snap == self._snap:
            return None
        self._snap = snap
        return self.read()

    async def run(self, on_update: OnUpdate) -> None:
        """Send the initial set, then every change, until cancelled (blocking reads go to a thread)."""
        first = True
        while True:
            pods = await asyncio.to_thread(self.poll)
            if pods is not None or first:
                res = on_update(pods if pods is not None else [])
                if inspect.isawaitable(res):
                    await res
                first = False
            await self.clock.sleep(self.period)


class URLPodSource:
    """The http source (kubelet pkg/kubelet/config/http.go, --manifest-url): the URL is fetched every
    `period` seconds and holds one Pod or a PodList; a change in the body updates the set. A fetch or
    decode error keeps the last good set (and is logged), as the kubelet does."""

    def __init__(self, url: str, node_name: str, clock: Clock | None = None,
                 period: float = DEFAULT_HTTP_PERIOD, headers: Mapping[str, str] | None = None) -> None:
        self.url = url
        self.node_name = node_name
        self.clock = clock or REAL_CLOCK
        self.period = period
        self.headers = dict(headers or {})
        self._body: bytes | None = None
        self._seen: dict[str, str] = {}
        self.error = ""

    async def fetch(self) -> list[dict[str, Any]] | None:
        """The pods at the URL when its body changed since the last fetch, else None."""
        import aiohttp

        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s, \
                    s.get(self.url, headers=self.headers) as resp:
                if resp.status != 200:
                    raise ManifestError(f"{self.url}: {resp.status} {resp.reason}")
                body = await resp.read()
            if body == self._body:
                return None
            pods = [apply_static_defaults(p, self.node_name, self.url, kind=HTTP_SOURCE)
                    for p in (decode_manifest(body.decode(), self.url) if body.strip() else [])]
        except (aiohttp.ClientError, TimeoutError, OSError, ManifestError, UnicodeDecodeError) as e:
            if str(e) != self.error:
                log.warning("static pods from %s: %s (keeping the last good set)", self.url, e)
            self.error = str(e)
            return None
        self.error, self._body = "", body
        seen_now = {}
        for p in pods:
            uid = p["metadata"]["uid"]
            seen_now[uid] = self._seen.get(uid) or _seen_stamp(self.clock.now())
            p["metadata"]["annotations"].setdefault(CONFIG_SEEN, seen_now[uid])
        self._seen = seen_now
        return pods

    async def run(self, on_update: OnUpdate) -> None:
        while True:
            pods = await self.fetch()
            if pods is not None:
                res = on_update(pods)
                if inspect.isawaitable(res):
                    await res
            await self.clock.sleep(self.period)


def _seen_stamp(ts: float) -> str:
    """Go's RFC3339Nano, which drops trailing zeros of the fraction."""
    import datetime

    d = datetime.datetime.fromtimestamp(ts, datetime.UTC)
    frac = f"{d.microsecond:06d}".rstrip("0")
    return d.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


# -- mirror pods -------------------------------------------------------------------------------------


def is_static_pod(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("metadata") or {}).get("annotations") or {}).get(CONFIG_SOURCE, "api") != "api"


def is_mirror_pod(pod: Mapping[str, Any]) -> bool:
    return CONFIG_MIRROR in ((pod.get("metadata") or {}).get("annotations") or {})


def mirror_pod(static: Mapping[str, Any], node_name: str, node_uid: str) -> dict[str, Any]:
    """The API object for a static pod: same spec and annotations plus config.mirror = config.hash, owned by
    the Node; no uid/resourceVersion (the apiserver assigns its own)."""
    pod = copy.deepcopy(dict(static))
    meta = pod.setdefault("metadata", {})
    ann = dict(meta.get("annotations") or {})
    ann[CONFIG_MIRROR] = ann.get(CONFIG_HASH, "")
    meta["annotations"] = ann
    for k in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"):
        meta.pop(k, None)
    meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid,
                                "controller": True}]
    pod.pop("status", None)
    return pod


def mirror_matches(static: Mapping[str, Any], mirror: Mapping[str, Any]) -> bool:
    """A mirror pod is current when its config.mirror annotation equals the static pod's hash."""
    s = ((static.get("metadata") or {}).get("annotations") or {}).get(CONFIG_HASH)
    m = ((mirror.get("metadata") or {}).get("annotations") or {}).get(CONFIG_MIRROR)
    return bool(s) and s == m
