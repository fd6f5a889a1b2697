import json

import pytest

from cni import skel
from cni.errors import CNIError

ENV = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/run/netns/x", "CNI_IFNAME": "eth0",
       "CNI_PATH": "/opt/cni/bin"}


class Recorder:
    def __init__(self, fail=None):
        self.calls = []
        self.fail = fail

    def _rec(self, verb, a):
        self.calls.append((verb, a))
        if self.fail:
            raise self.fail

    def add(self, a):
        self._rec("add", a)
        return {"cniVersion": a.version, "ips": [{"address": "10.0.0.2/24", "gateway": "10.0.0.1"}]}

    def delete(self, a):
        self._rec("del", a)

    def check(self, a):
        self._rec("check", a)

    def gc(self, a):
        self._rec("gc", a)

    def status(self, a):
        self._rec("status", a)


def conf(version="1.0.0", **kw):
    return json.dumps({"cniVersion": version, "name": "net1", "type": "x", **kw}).encode()


def run(env, stdin, plugin=None):
    plugin = plugin or Recorder()
    code, out = skel.dispatch(plugin, env, stdin)
    return code, json.loads(out) if out.strip() else None, plugin


def test_add_parses_env_and_converts_result_for_each_version():
    for v, has_version in (("0.3.0", True), ("0.3.1", True), ("0.4.0", True), ("1.0.0", False),
                           ("1.1.0", False)):
        code, out, p = run(dict(ENV, CNI_ARGS="K8S_POD_NAME=a;IgnoreUnknown=1"), conf(v))
        assert code == 0
        assert out["cniVersion"] == v
        assert ("version" in out["ips"][0]) is has_version
        a = p.calls[0][1]
        assert (a.container_id, a.ifname, a.netns, a.path) == ("c1", "eth0", "/run/netns/x", ["/opt/cni/bin"])
        assert a.args == {"K8S_POD_NAME": "a", "IgnoreUnknown": "1"}


def test_version_verb_needs_no_other_env():
    code, out, _ = run({"CNI_COMMAND": "VERSION"}, conf("0.4.0"))
    assert code == 0 and out["cniVersion"] == "0.4.0"
    assert set(out["supportedVersions"]) >= {"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}
    code, out, _ = run({"CNI_COMMAND": "VERSION"}, b"")
    assert code == 0 and out["cniVersion"] == "1.1.0"


@pytest.mark.parametrize("env,stdin,code", [
    ({}, conf(), 4),
    ({"CNI_COMMAND": "BOGUS"}, conf(), 4),
    ({k: v for k, v in ENV.items() if k != "CNI_NETNS"}, conf(), 4),
    ({k: v for k, v in ENV.items() if k != "CNI_PATH"}, conf(), 4),
    (dict(ENV, CNI_CONTAINERID="bad id!"), conf(), 4),
    (dict(ENV, CNI_IFNAME="a/b"), conf(), 4),
    (dict(ENV, CNI_IFNAME="x" * 16), conf(), 4),
    (dict(ENV, CNI_ARGS="novalue"), conf(), 4),
    (ENV, b"{not json", 6),
    (ENV, b"[1,2]", 6),
    (ENV, conf("0.2.0"), 1),
    (ENV, json.dumps({"name": "n"}).encode(), 1),
    (ENV, conf(name="bad name"), 7),
    (dict(ENV, CNI_COMMAND="GC"), conf("1.0.0"), 1),
    (dict(ENV, CNI_COMMAND="STATUS"), conf("0.4.0"), 1),
])
def test_errors_have_spec_codes(env, stdin, code):
    rc, out, p = run(env, stdin)
    assert rc == 1
    assert out["code"] == code and out["msg"]
    assert p.calls == []


def test_del_does_not_need_netns_and_gc_status_need_1_1():
    env = {k: v for k, v in ENV.items() if k != "CNI_NETNS"}
    rc, out, p = run(dict(env, CNI_COMMAND="DEL"), conf())
    assert rc == 0 and out is None and p.calls[0][0] == "del"
    for verb in ("GC", "STATUS"):
        rc, out, p = run({"CNI_COMMAND": verb, "CNI_PATH": "/x"}, conf("1.1.0"))
        assert rc == 0 and p.calls[0][0] == verb.lower()


def test_plugin_errors_typed_once_and_everything_else_is_999():
    rc, out, _ = run(ENV, conf(), Recorder(CNIError(11, "busy", "try later")))
    assert (rc, out["code"], out["msg"], out["details"]) == (1, 11, "busy", "try later")
    rc, out, _ = run(ENV, conf(), Recorder(KeyError("boom")))
    assert rc == 1 and out["code"] == 999 and "KeyError" in out["details"]
    assert out["cniVersion"] == "1.0.0"
