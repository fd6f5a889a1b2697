import subprocess
import sys

from cni import iptables, version
from cni.errors import CNIError
from cni.install import install
from cni.plugins.bridge import host_veth_name, parse_conf, veth_prefix


def test_convert_result_round_trip():
    r = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.2/24"}, {"address": "fd00::2/64"}]}
    old = version.convert_result(r, "0.3.1")
    assert [i["version"] for i in old["ips"]] == ["4", "6"]
    assert "version" not in version.convert_result(old, "1.1.0")["ips"][0]


def test_host_veth_names_are_stable_short_and_per_network():
    a = host_veth_name("net1", "c1", "eth0")
    assert a == host_veth_name("net1", "c1", "eth0") and len(a) == 15
    assert a.startswith(veth_prefix("net1"))
    assert not host_veth_name("net2", "c1", "eth0").startswith(veth_prefix("net1"))
    assert a != host_veth_name("net1", "c1", "eth1")


def test_tag_round_trips_through_the_save_format():
    t = iptables.tag("masq", "net1", "c1", "eth0")
    line = f'-A POSTROUTING -s 10.0.0.2/32 -m comment --comment "{t}" -j NA-MASQ-x'
    m = iptables.TAG_RE.search(line)
    assert m and m.groups() == ("masq", "net1", "c1", "eth0")
    assert len(iptables.chain_name("NA-MASQ-", "n", "c", "e")) <= 28


def test_bridge_conf_defaults_and_validation():
    c = parse_conf({"name": "n", "isDefaultGateway": True, "ipam": {"type": "host-local"}})
    assert c.bridge == "cni0" and c.is_gateway and c.is_default_gateway
    for bad, code in (({"name": "n"}, 7), ({"name": "n", "ipam": {"type": "x"}, "mtu": 5}, 7),
                      ({"name": "n", "ipam": {"type": "x"}, "vlanTrunk": [{"id": 1}]}, 2)):
        try:
            parse_conf(bad)
        except CNIError as e:
            assert e.code == code
        else:
            raise AssertionError(bad)


def test_launchers_are_lean_and_answer_version(tmp_path):
    paths = install(str(tmp_path / "bin"), str(tmp_path / "conf"))
    assert (tmp_path / "conf" / "10-nodeagent.conflist").exists()
    (tmp_path / "conf" / "10-nodeagent.conflist").write_text("mine")
    install(str(tmp_path / "bin"), str(tmp_path / "conf"))
    assert (tmp_path / "conf" / "10-nodeagent.conflist").read_text() == "mine"  # never overwritten
    for p in paths[:3]:
        out = subprocess.run([p], input=b'{"cniVersion":"1.0.0"}', env={"CNI_COMMAND": "VERSION"},
                             capture_output=True, check=True).stdout
        assert b'"supportedVersions"' in out
    # the lean path imports no third-party module
    code = ("import sys; sys.path.insert(0, '.'); import cni.client, cni.skel, cni.plugins.host_local, "
            "cni.plugins.portmap; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('pyroute2', 'iptc', 'yaml', 'grpc')))")
    lean = subprocess.run([sys.executable, "-IS", "-c", code], capture_output=True, text=True, check=True)
    assert lean.stdout.strip() == "[]"


def test_daemon_wire_format_round_trips():
    from cni.client import decode_request, encode_request

    env = {"CNI_COMMAND": "ADD", "CNI_ARGS": "A=1;B=2", "EMPTY": ""}
    plugin, got, stdin = decode_request(encode_request("bridge", env, b'{"x":"\\u0000"}\n'))
    assert (plugin, got, stdin) == ("bridge", env, b'{"x":"\\u0000"}\n')
    for bad in (b"", b"HTTP/1.1\n", b"NACNI1 bridge\nA=1"):
        try:
            decode_request(bad)
        except ValueError:
            continue
        raise AssertionError(bad)


def test_portmap_rules_dnat_hairpin_and_localhost():
    import ipaddress

    from cni.plugins.portmap import mappings, rules

    maps = mappings({"runtimeConfig": {"portMappings": [
        {"hostPort": 8080, "containerPort": 80, "protocol": "TCP"},
        {"hostPort": 5353, "containerPort": 53, "protocol": "udp", "hostIP": "127.0.0.1"},
        {"hostPort": 9, "containerPort": 9, "hostIP": "::1"}]}})
    assert [m["protocol"] for m in maps] == ["tcp", "udp"]  # IPv6 host IPs are skipped
    lines = rules("n1", "c1", "eth0", ipaddress.IPv4Interface("10.0.0.5/24"), maps, snat=True)
    text = "\n".join(lines)
    assert "--dport 8080" in text and "--to-destination 10.0.0.5:80" in text
    assert "-d 127.0.0.1/32 -p udp -m udp --dport 5353" in text
    assert "-s 10.0.0.0/24 -p tcp -m tcp --dport 80" in text and "-s 127.0.0.0/8 -p tcp" in text
    assert any(ln.startswith("-I POSTROUTING 1 -d 10.0.0.5/32") for ln in lines)
    assert all("nodeagent/portmap net=n1 id=c1 if=eth0" in ln for ln in lines if ln.startswith(("-A", "-I")))
    try:
        mappings({"runtimeConfig": {"portMappings": [{"hostPort": 0, "containerPort": 80}]}})
    except CNIError as e:
        assert e.code == 7
    else:
        raise AssertionError("hostPort 0 accepted")


def test_invoker_passes_its_extra_environment_to_every_plugin(tmp_path):
    """The runtime names its instance's cni-daemon to the plugins (NODEAGENT_CNI_SOCKET);
    CNI_* stay the spec's."""
    import asyncio
    import json

    from cni.invoke import CNI, Attachment

    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    bin_dir.mkdir()
    conf_dir.mkdir()
    plugin = bin_dir / "envdump"
    plugin.write_text('#!/bin/sh\ncat >/dev/null\nprintf \'{"cniVersion":"1.0.0","dns":{"domain":"%s|%s"}}\' '
                      '"$NODEAGENT_CNI_SOCKET" "$CNI_COMMAND"\n')
    plugin.chmod(0o755)
    (conf_dir / "10-x.conflist").write_text(json.dumps(
        {"cniVersion": "1.0.0", "name": "x", "plugins": [{"type": "envdump"}]}))
    att = Attachment(container_id="c1", netns="/proc/self/ns/net")
    with_sock = asyncio.run(CNI(conf_dir, [str(bin_dir)], tmp_path / "cache", env={
        "NODEAGENT_CNI_SOCKET": "/x/cni.sock", "CNI_COMMAND": "DEL"}).add(att))
    # ours for the socket; the verb is never overridden
    assert with_sock["dns"]["domain"] == "/x/cni.sock|ADD"
    plain = asyncio.run(CNI(conf_dir, [str(bin_dir)], tmp_path / "cache2").add(att))
    assert plain["dns"]["domain"] == "|ADD"


def test_our_installed_plugins_are_recognised_and_nothing_else(tmp_path):
    """The runtime runs a plugin in-process only when its executable is ours, installed from this tree: the
    launcher or the C thin client naming this tree and one plugin; a foreign plugin, or ours from another
    tree, is exec'd."""
    from cni.install import ROOT, installed_plugin, launcher

    bin_dir = tmp_path / "bin"
    install(str(bin_dir), None)
    assert {p: installed_plugin(str(bin_dir / p)) for p in ("nodeagent-bridge", "nodeagent-host-local",
                                                             "nodeagent-portmap")} == \
        {"nodeagent-bridge": "bridge", "nodeagent-host-local": "host-local", "nodeagent-portmap": "portmap"}
    other = tmp_path / "other"
    other.write_text(launcher("bridge", root=ROOT / "elsewhere"))
    foreign = tmp_path / "foreign"
    foreign.write_text(f"#!/bin/sh\n# sys.path.insert(0, {str(ROOT)!r}) main('bridge'\n")
    assert installed_plugin(str(other)) is None and installed_plugin(str(foreign)) is None
    assert installed_plugin(str(tmp_path / "missing")) is None


def test_the_invoker_runs_our_plugins_in_process_and_execs_the_others(tmp_path, monkeypatch):
    """Our portmap (installed from this tree) is dispatched on a worker thread with the environment and
    stdin its exec would get; a foreign plugin in the same chain is exec'd; in_process=False execs ours."""
    import asyncio
    import json

    from cni.invoke import CNI, Attachment

    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    install(str(bin_dir), None)
    envdump = bin_dir / "envdump"
    envdump.write_text("#!/bin/sh\ncat >/dev/null\n"
                       "printf '{\"cniVersion\":\"1.0.0\",\"dns\":{\"domain\":\"exec\"}}'\n")
    envdump.chmod(0o755)
    conf_dir.mkdir()
    (conf_dir / "10-x.conflist").write_text(json.dumps(
        {"cniVersion": "1.0.0", "name": "x",
         "plugins": [{"type": "envdump"}, {"type": "nodeagent-portmap"}]}))
    calls = []

    def dispatch(self, name, env, stdin):
        calls.append((name, env["CNI_COMMAND"], env["NODEAGENT_CNI_SOCKET"], json.loads(stdin)))
        return 0, json.dumps({**json.loads(stdin)["prevResult"], "interfaces": []}).encode()

    monkeypatch.setattr(CNI, "_dispatch", dispatch)
    att = Attachment(container_id="c1", netns="/proc/self/ns/net")
    cni = CNI(conf_dir, [str(bin_dir)], tmp_path / "cache", env={"NODEAGENT_CNI_SOCKET": "/x/cni.sock"})
    result = asyncio.run(cni.add(att))
    assert [c[:3] for c in calls] == [("portmap", "ADD", "/x/cni.sock")]
    assert calls[0][3]["prevResult"]["dns"]["domain"] == "exec" and result["interfaces"] == []
    asyncio.run(cni.delete(att))
    assert [c[1] for c in calls] == ["ADD", "DEL"]
    calls.clear()
    execs = []

    class Proc:
        returncode = 0

        async def communicate(self, stdin):
            return b'{"cniVersion":"1.0.0"}', b""

    async def exec_(path, *args, **kw):
        execs.append(path.rsplit("/", 1)[-1])
        return Proc()

    monkeypatch.setattr(asyncio, "create_subprocess_exec", exec_)
    plain = CNI(conf_dir, [str(bin_dir)], tmp_path / "cache2", in_process=False)
    asyncio.run(plain.add(att))
    assert calls == [] and execs == ["envdump", "nodeagent-portmap"]
