"""A small test-side CNI runtime: exec a plugin with CNI_* env and config on stdin, chain a conflist.

Independent of the plugins under test (it shares no code with cni/), so it checks
them the way a runtime such as libcni would call them.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
from dataclasses import dataclass, field
from typing import Any


class PluginError(Exception):
    def __init__(self, rc: int, out: dict[str, Any], stderr: str) -> None:
        super().__init__(f"plugin failed rc={rc}: {out} {stderr[-300:]}")
        self.rc, self.out, self.stderr = rc, out, stderr

    @property
    def code(self) -> int:
        return int(self.out.get("code", -1))


@dataclass
class Runtime:
    path: list[str]
    extra_env: dict[str, str] = field(default_factory=dict)

    def exe(self, plugin_type: str) -> str:
        for d in self.path:
            p = os.path.join(d, plugin_type)
            if os.access(p, os.X_OK):
                return p
        raise FileNotFoundError(plugin_type)

    def env(self, command: str, cid: str = "", netns: str = "", ifname: str = "eth0",
            args: str = "") -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "CNI_COMMAND": command,
               "CNI_PATH": os.pathsep.join(self.path), **self.extra_env}
        if cid:
            env["CNI_CONTAINERID"] = cid
        if netns:
            env["CNI_NETNS"] = netns
        if ifname and command in ("ADD", "DEL", "CHECK"):
            env["CNI_IFNAME"] = ifname
        if args:
            env["CNI_ARGS"] = args
        return env

    def call(self, plugin_type: str, command: str, conf: dict[str, Any] | bytes, **kw: Any) -> Any:
        stdin = conf if isinstance(conf, bytes) else json.dumps(conf).encode()
        env = self.env(command, **kw)
        p = subprocess.run([self.exe(plugin_type)], input=stdin, env=env, capture_output=True, timeout=60)
        out = json.loads(p.stdout) if p.stdout.strip() else None
        if p.returncode != 0:
            raise PluginError(p.returncode, out or {}, p.stderr.decode(errors="replace"))
        return out

    def popen(self, plugin_type: str, command: str, conf: dict[str, Any], **kw: Any) -> subprocess.Popen:
        p = subprocess.Popen([self.exe(plugin_type)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=self.env(command, **kw))
        assert p.stdin
        p.stdin.write(json.dumps(conf).encode())
        p.stdin.close()
        p.stdin = None  # so communicate() only reads
        return p

    # -- conflists, as libcni builds each plugin's config --------------------------------------------
    @staticmethod
    def plugin_conf(conflist: dict[str, Any], plugin: dict[str, Any], prev: dict[str, Any] | None,
                    runtime_config: dict[str, Any] | None = None) -> dict[str, Any]:
        conf = copy.deepcopy(plugin)
        conf["name"] = conflist["name"]
        conf["cniVersion"] = conflist["cniVersion"]
        if prev is not None:
            conf["prevResult"] = prev
        caps = plugin.get("capabilities") or {}
        rc = {k: v for k, v in (runtime_config or {}).items() if caps.get(k)}
        if rc:
            conf["runtimeConfig"] = rc
        return conf

    def add_list(self, conflist: dict[str, Any], cid: str, netns: str, ifname: str = "eth0",
                 runtime_config: dict[str, Any] | None = None) -> dict[str, Any]:
        prev = None
        for plugin in conflist["plugins"]:
            prev = self.call(plugin["type"], "ADD", self.plugin_conf(conflist, plugin, prev, runtime_config),
                             cid=cid, netns=netns, ifname=ifname)
        assert prev is not None
        return prev

    def del_list(self, conflist: dict[str, Any], cid: str, netns: str, ifname: str = "eth0",
                 prev: dict[str, Any] | None = None, runtime_config: dict[str, Any] | None = None) -> None:
        for plugin in reversed(conflist["plugins"]):
            self.call(plugin["type"], "DEL", self.plugin_conf(conflist, plugin, prev, runtime_config),
                      cid=cid, netns=netns, ifname=ifname)

    def check_list(self, conflist: dict[str, Any], cid: str, netns: str, prev: dict[str, Any],
                   ifname: str = "eth0", runtime_config: dict[str, Any] | None = None) -> None:
        for plugin in conflist["plugins"]:
            self.call(plugin["type"], "CHECK", self.plugin_conf(conflist, plugin, prev, runtime_config),
                      cid=cid, netns=netns, ifname=ifname)

    def gc_list(self, conflist: dict[str, Any], valid: list[dict[str, str]]) -> None:
        for plugin in conflist["plugins"]:
            conf = self.plugin_conf(conflist, plugin, None)
            conf["cni.dev/valid-attachments"] = valid
            self.call(plugin["type"], "GC", conf)
