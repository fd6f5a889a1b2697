"""The runtime side of CNI: load a network's config list, run its plugin chain, cache the result.

Follows the CNI spec (SPEC.md, versions 0.4.0 to 1.1.0) as libcni does: the first config file in
the conf dir (sorted by name: *.conflist, *.conf, *.json) names the network; ADD runs the plugins
in order, each getting the previous one's result as `prevResult`; the last result is cached under
`<cache_dir>/results/` with the exact config used, so DEL and CHECK run the same chain (in reverse
for DEL) even after the conf dir changed. DEL is idempotent and still runs when the netns is gone:
plugins are told the path and treat a missing one as "carry on releasing".

A plugin whose executable is one of ours, installed from this tree (`cni.install.installed_plugin`), runs
in-process on a worker thread: the exec'd thin client would only forward the same environment and stdin
to the same `skel.dispatch` (in the daemon, or in its own fallback), so the answer is the same without a
fork, an exec and a child-watcher thread per plugin per pod. Any other plugin is exec'd, as the spec says.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import stat
from pathlib import Path
from typing import Any

from kernel.fs import atomic_write


class CNIError(Exception):
    """A plugin failed: the spec's error object (code, msg, details) and the plugin's name."""

    def __init__(self, code: int, msg: str, details: str = "", plugin: str = "") -> None:
        super().__init__(f"{plugin + ': ' if plugin else ''}{msg}{' (' + details + ')' if details else ''}")
        self.code, self.msg, self.details, self.plugin = code, msg, details, plugin


NOT_INITIALIZED = "cni plugin not initialized"  # go-cni's ErrCNINotInitialized, which containerd reports


class NoNetworkConfig(CNIError):
    """No loadable network config in the conf dir: go-cni's load error, word for word."""

    def __init__(self, conf_dir: str) -> None:
        super().__init__(0, f"no network config found in {conf_dir}: {NOT_INITIALIZED}")


@dataclasses.dataclass(frozen=True)
class NetworkConfigList:
    name: str
    cni_version: str
    plugins: tuple[dict[str, Any], ...]
    raw: bytes  # the file's bytes, cached with the result

    @classmethod
    def parse(cls, raw: bytes, source: str = "") -> NetworkConfigList:
        try:
            doc = json.loads(raw)
        except ValueError as e:
            raise CNIError(6, f"invalid JSON in CNI config {source}: {e}") from e
        if "plugins" not in doc:  # a single-plugin .conf file
            doc = {"cniVersion": doc.get("cniVersion", "0.4.0"), "name": doc.get("name", ""),
                   "plugins": [doc]}
            raw = json.dumps(doc).encode()
        if not doc.get("name") or not doc.get("plugins"):
            raise CNIError(6, f"CNI config {source} needs a name and at least one plugin")
        for p in doc["plugins"]:
            if not p.get("type"):
                raise CNIError(6, f"CNI config {source}: every plugin needs a type")
        return cls(doc["name"], doc.get("cniVersion", "0.4.0"), tuple(doc["plugins"]), raw)


@dataclasses.dataclass(frozen=True)
class Attachment:
    """One network attachment: who (container id, netns, ifname) and the runtime's arguments."""

    container_id: str
    netns: str
    ifname: str = "eth0"
    args: tuple[tuple[str, str], ...] = ()  # CNI_ARGS pairs
    capability_args: dict[str, Any] = dataclasses.field(default_factory=dict)


def load_conf_dir(conf_dir: str | Path) -> NetworkConfigList | None:
    """The network the runtime uses: the first loadable config file by name, as libcni picks it."""
    return _load_files(_conf_files(conf_dir))


_FileKey = tuple[str, int, int, int, int]  # path, inode, size, mtime and ctime (ns)


def _conf_files(conf_dir: str | Path) -> list[_FileKey]:
    """The conf dir's config files by name, each with what changes when it is rewritten or replaced."""
    out = []
    try:
        entries = sorted(os.scandir(conf_dir), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return []
    for e in entries:
        if os.path.splitext(e.name)[1] not in (".conflist", ".conf", ".json"):
            continue
        try:
            st = e.stat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            out.append((e.path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return out


def _load_files(files: list[_FileKey]) -> NetworkConfigList | None:
    for path, *_ in files:
        with contextlib.suppress(CNIError, OSError):
            return NetworkConfigList.parse(Path(path).read_bytes(), path)
    return None


class CNI:
    def __init__(self, conf_dir: str | Path, bin_dirs: list[str], cache_dir: str | Path,
                 env: dict[str, str] | None = None, in_process: bool = True) -> None:
        """`in_process`: our own plugins (installed from this tree) run in this process (see above)."""
        self.conf_dir = str(conf_dir)
        self.in_process = in_process
        self._ours: dict[str, tuple[tuple[int, int, int, int], str | None]] = {}  # path → (stat, plugin)
        self._plugins: dict[str, Any] = {}  # plugin name → its object, for in-process calls
        self._conf: tuple[list[_FileKey], NetworkConfigList | None] | None = None  # (files' stats, network)
        self.bin_dirs = [str(b) for b in bin_dirs]
        self.cache_dir = Path(cache_dir)
        # Runtime-specific variables every plugin gets besides CNI_*: e.g. NODEAGENT_CNI_SOCKET, the
        # instance's own cni-daemon, so several runtimes on one host never share one.
        self.env = dict(env or {})

    def network(self) -> NetworkConfigList | None:
        """The conf dir's network, read and parsed again only when a config file there was added, removed,
        rewritten or replaced (its stat: a change takes effect at the next call, as containerd reloads on
        the directory's change events); a sandbox asks twice, on the event loop."""
        files = _conf_files(self.conf_dir)
        if self._conf is None or self._conf[0] != files:
            self._conf = (files, _load_files(files))
        return self._conf[1]

    # -- verbs -----------------------------------------------------------------------------------
    async def add(self, att: Attachment) -> dict[str, Any]:
        net = self.network()
        if net is None:
            raise NoNetworkConfig(self.conf_dir)
        prev: dict[str, Any] | None = None
        for plugin in net.plugins:
            prev = await self._exec("ADD", net, plugin, att, prev)
        result = prev or {"cniVersion": net.cni_version}
        await asyncio.to_thread(self._save, net, att, result)  # two fsyncs: not on the caller's loop
        return result

    async def check(self, att: Attachment) -> None:
        net, cached = self._cached(att)
        if net is None:
            raise CNIError(11, f"no cached result for {att.container_id}")
        for plugin in net.plugins:
            await self._exec("CHECK", net, plugin, att, cached)

    async def delete(self, att: Attachment) -> None:
        """Run DEL through the chain in reverse with the cached result; then forget it."""
        net, cached = self._cached(att)
        if net is None:
            net = self.network()
            if net is None:
                return  # never attached by us and nothing configured: nothing to release
        errors = []
        for plugin in reversed(net.plugins):
            try:
                await self._exec("DEL", net, plugin, att, cached)
            except CNIError as e:
                errors.append(e)
        if errors:
            raise errors[0]
        self._forget(net, att)

    # -- plugin execution ------------------------------------------------------------------------
    def _find(self, plugin_type: str) -> str:
        for d in self.bin_dirs:
            p = os.path.join(d, plugin_type)
            if os.access(p, os.X_OK):
                return p
        raise CNIError(1, f"failed to find plugin {plugin_type!r} in path {self.bin_dirs}")

    def _stdin(self, net: NetworkConfigList, plugin: dict[str, Any], att: Attachment,
               prev: dict[str, Any] | None) -> bytes:
        conf = dict(plugin)
        conf["name"] = net.name
        conf["cniVersion"] = net.cni_version
        if prev is not None:
            conf["prevResult"] = prev
        caps = plugin.get("capabilities") or {}
        rc = {k: v for k, v in att.capability_args.items() if caps.get(k)}
        if rc:
            conf["runtimeConfig"] = rc
        return json.dumps(conf).encode()

    async def _exec(self, command: str, net: NetworkConfigList, plugin: dict[str, Any], att: Attachment,
                    prev: dict[str, Any] | None) -> dict[str, Any] | None:
        path = self._find(plugin["type"])
        env = {
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": att.container_id,
            "CNI_NETNS": att.netns,
            "CNI_IFNAME": att.ifname,
            "CNI_ARGS": ";".join(f"{k}={v}" for k, v in att.args),
            "CNI_PATH": os.pathsep.join(self.bin_dirs),
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        }
        env = {**self.env, **env}
        ours = self._our_plugin(path) if self.in_process else None
        stdin = self._stdin(net, plugin, att, prev)
        if ours is not None:
            code, out = await asyncio.to_thread(self._dispatch, ours, env, stdin)
            return self._result(command, plugin, prev, code, out, b"")
        proc = await asyncio.create_subprocess_exec(
            path, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env)
        out, err = await proc.communicate(stdin)
        return self._result(command, plugin, prev, proc.returncode or 0, out, err)

    def _our_plugin(self, path: str) -> str | None:
        """The plugin name when `path` is our own plugin installed from this tree (remembered per file)."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
        known = self._ours.get(path)
        if known is None or known[0] != key:
            from cni.install import installed_plugin

            known = self._ours[path] = (key, installed_plugin(path))
        return known[1]

    def _dispatch(self, name: str, env: dict[str, str], stdin: bytes) -> tuple[int, bytes]:
        """Our plugin's verb on this (worker) thread: what its thin client would get from the daemon."""
        from cni import skel
        from cni.client import plugin_object

        obj = self._plugins.get(name)
        if obj is None:
            obj = self._plugins[name] = plugin_object(name)
        return skel.dispatch(obj, env, stdin)

    @staticmethod
    def _result(command: str, plugin: dict[str, Any], prev: dict[str, Any] | None, code: int, out: bytes,
                err: bytes) -> dict[str, Any] | None:
        """A plugin's answer as the spec reads it: its error object on a non-zero exit, its result on ADD."""
        if code != 0:
            try:
                doc = json.loads(out)
                raise CNIError(int(doc.get("code", 999)), doc.get("msg", ""), doc.get("details", ""),
                               plugin["type"])
            except (ValueError, AttributeError):
                raise CNIError(999, (err or out).decode(errors="replace").strip() or
                               f"exit status {code}", plugin=plugin["type"]) from None
        if command != "ADD":
            return None
        try:
            return json.loads(out) if out.strip() else prev
        except ValueError as e:
            raise CNIError(999, f"invalid result: {e}", plugin=plugin["type"]) from e

    # -- result cache (libcni layout: results/<network>-<container>-<ifname>) ----------------------
    def _cache_file(self, net_name: str, att: Attachment) -> Path:
        return self.cache_dir / "results" / f"{net_name}-{att.container_id}-{att.ifname}"

    def _save(self, net: NetworkConfigList, att: Attachment, result: dict[str, Any]) -> None:
        doc = {
            "kind": "cni#v1",
            "containerId": att.container_id,
            "config": base64.b64encode(net.raw).decode(),
            "ifName": att.ifname,
            "networkName": net.name,
            "cniArgs": [list(a) for a in att.args],
            "capabilityArgs": att.capability_args,
            "result": result,
        }
        f = self._cache_file(net.name, att)
        f.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(f, json.dumps(doc))

    def _cached(self, att: Attachment) -> tuple[NetworkConfigList | None, dict[str, Any] | None]:
        d = self.cache_dir / "results"
        if not d.is_dir():
            return None, None
        suffix = f"-{att.container_id}-{att.ifname}"
        for f in sorted(d.glob(f"*{suffix}")):
            with contextlib.suppress(OSError, ValueError, CNIError, KeyError):
                doc = json.loads(f.read_text())
                return NetworkConfigList.parse(base64.b64decode(doc["config"]), str(f)), doc.get("result")
        return None, None

    def _forget(self, net: NetworkConfigList, att: Attachment) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._cache_file(net.name, att).unlink()


def first_ip(result: dict[str, Any] | None) -> tuple[str, list[str]]:
    """The pod IP and additional IPs from a CNI result (any spec version's shape)."""
    ips: list[str] = []
    if result:
        for entry in result.get("ips", []):
            addr = entry.get("address", "")
            if addr:
                ips.append(addr.split("/")[0])
        for key in ("ip4", "ip6"):  # 0.2.0 results
            if result.get(key, {}).get("ip"):
                ips.append(result[key]["ip"].split("/")[0])
    return (ips[0] if ips else ""), ips[1:]
