"""critest's specs against our runtime and Debian's containerd 1.6, side by side.

Session fixtures: the images critest uses (built locally from busybox-static, plus two tiny static C
programs standing in for nginx and e2e's nonewprivs), a docker-registry on 127.0.0.1 serving them under
critest's names through registry mirrors (registries.yaml for ours, the CRI plugin's mirrors for
containerd), one bridge+portmap CNI network per runtime, and one runtime of each kind for the whole
directory. At the end a table shows every spec's outcome on both runtimes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import textwrap
import urllib.request
from pathlib import Path

import grpc
import pytest

from nodeagent.testing.images import BUSYBOX as BUSYBOX_SPEC
from nodeagent.testing.images import Entry, ImageSpec, find_busybox
from tests.conformance.cri import framework as fw
from tests.harness.resources import remove_cgroup, unique

pytestmark = pytest.mark.root

RUNTIMES = ("nodeagent", "containerd")

# -- stand-ins for critest's non-busybox images ---------------------------------------------------
NGINX_C = r"""
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
/* Acts like nginx for the specs: /var/run/nginx.pid, process name "nginx", "master process" in its
   command line, and an HTTP server on :80 (busybox httpd as its worker). */
static pid_t worker;
static void stop(int sig) { (void)sig; if (worker > 0) kill(worker, SIGTERM); _exit(0); }
int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "master process") != 0) {
        char *again[] = {"nginx", "master process", "nginx", NULL};
        execv("/usr/sbin/nginx", again);
        return 127;
    }
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    FILE *f = fopen("/var/run/nginx.pid", "w");
    if (f) { fprintf(f, "%d\n", getpid()); fclose(f); }
    worker = fork();
    if (worker == 0) {
        execl("/bin/busybox", "httpd", "-f", "-p", "80", "-h", "/var/www", (char *)NULL);
        _exit(127);
    }
    for (;;) { if (wait(NULL) < 0) pause(); }
}
"""

# Debian's busybox-static has no pgrep applet; e2e's busybox does (critest uses `pgrep sleep`).
PGREP = b"""#!/bin/sh
# pgrep PATTERN: pids whose process name matches, like procps/busybox pgrep
found=1
for d in /proc/[0-9]*; do
    comm=$(cat "$d/comm" 2>/dev/null) || continue
    if echo "$comm" | grep -Eq -- "$1"; then echo "${d#/proc/}"; found=0; fi
done
exit $found
"""

# ...nor ipcs: list the System V shared memory segments (their ids) from procfs.
IPCS = b"""#!/bin/sh
cat /proc/sysvipc/shm
"""

NONEWPRIVS_C = r"""
#include <stdio.h>
#include <unistd.h>
/* e2e-test-images/nonewprivs: a setuid-root binary reporting the effective uid it got. */
int main(void) { printf("Effective uid: %d\n", (int)geteuid()); fflush(stdout); return 0; }
"""


def _compile(src: str, dest: Path) -> bytes:
    c = dest.with_suffix(".c")
    c.write_text(src)
    p = subprocess.run(["gcc", "-static", "-Os", "-o", str(dest), str(c)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot build a static helper with gcc: {p.stderr[-500:]}")
    return dest.read_bytes()


def _labelled(name: str, value: str) -> ImageSpec:
    return dataclasses.replace(BUSYBOX_SPEC, name=f"localhost/critest-{name}", labels=(("critest", value),))


@dataclasses.dataclass
class Mirror:
    registry: object
    digest_ref: str  # critest's "image with digest", by the digest of the image we pushed


@pytest.fixture(scope="session")
def critest_registry(tmp_path_factory, images):
    from tests.integration.cri.containerd import pause_spec
    from tests.integration.images.registry import REGISTRY_BIN, Registry

    if not Path(REGISTRY_BIN).exists() or not shutil.which("skopeo"):
        pytest.skip("docker-registry and skopeo are needed (make install adds them)")
    if not shutil.which("gcc"):
        pytest.skip("gcc is needed to build the nginx and nonewprivs stand-ins")
    work = tmp_path_factory.mktemp("critest-bin")
    nginx = _compile(NGINX_C, work / "nginx")
    nnp = _compile(NONEWPRIVS_C, work / "nonewprivs")
    from cri.runtime.service import RuntimeOptions

    pause_bin = RuntimeOptions(state_dir=work).pause
    var_run = Entry("var/run", kind="dir", mode=0o755)
    bin_dirs = tuple(Entry(d, kind="dir", mode=0o755) for d in ("bin", "usr", "usr/bin"))
    busybox = Path(find_busybox()).read_bytes()
    specs: dict[str, ImageSpec] = {
        "e2e-test-images/busybox:1.29-2": dataclasses.replace(
            BUSYBOX_SPEC, extra_layers=((var_run, *bin_dirs,
                                         Entry("usr/bin/pgrep", data=PGREP, mode=0o755),
                                         Entry("usr/bin/ipcs", data=IPCS, mode=0o755),
                                         # e2e's busybox links its applets hard: masking /bin/ls masks ls
                                         # only (a layer may only link within itself, so busybox again)
                                         Entry("bin/busybox", data=busybox, mode=0o755),
                                         Entry("bin/ls", kind="hardlink", target="bin/busybox",
                                               mode=0o755)),),
            name="localhost/critest-busybox"),
        "pause:3.9": dataclasses.replace(pause_spec(pause_bin), name="localhost/critest-pause"),
        "e2e-test-images/nginx:1.14-2": ImageSpec(
            "localhost/critest-nginx", "v1", cmd=("/usr/sbin/nginx",), exposed_ports=("80/tcp",),
            extra_layers=((var_run, Entry("usr/sbin/nginx", data=nginx, mode=0o755)),)),
        # critest's hostnet-nginx: a web server on 12003, meant for the host's network namespace
        "k8s-staging-cri-tools/hostnet-nginx-amd64:latest": ImageSpec(
            "localhost/critest-hostnet-nginx", "v1",
            cmd=("httpd", "-f", "-p", str(fw.HOST_NET_WEB_PORT), "-h", "/var/www"),
            exposed_ports=(f"{fw.HOST_NET_WEB_PORT}/tcp",)),
        "e2e-test-images/httpd:2.4.39-4": ImageSpec(
            "localhost/critest-httpd", "v1", exposed_ports=("80/tcp",),
            cmd=("sh", "-c", "echo \"AH00094: Command line: 'httpd -D FOREGROUND'\"; "
                             "exec httpd -f -p 80 -h /var/www")),
        "e2e-test-images/nonewprivs:1.3": ImageSpec(
            "localhost/critest-nnp", "v1", entrypoint=("/usr/local/bin/nonewprivs",), cmd=None,
            extra_layers=((Entry("usr/local", kind="dir", mode=0o755),
                           Entry("usr/local/bin", kind="dir", mode=0o755),
                           Entry("usr/local/bin/nonewprivs", data=nnp, mode=0o4755)),)),
        "k8s-staging-cri-tools/test-image-latest:latest": _labelled("latest", "latest"),
        "k8s-staging-cri-tools/test-image-tag:test": _labelled("tag", "tag"),
        "k8s-staging-cri-tools/test-image-tag:all": _labelled("all", "all"),
        "k8s-staging-cri-tools/test-image-digest:latest": _labelled("digest", "digest"),
        "k8s-staging-cri-tools/test-image-user-uid:latest": dataclasses.replace(
            _labelled("uid", "uid"), user="1002"),
        "k8s-staging-cri-tools/test-image-user-username:latest": dataclasses.replace(
            _labelled("username", "username"), user="www-data"),
        "k8s-staging-cri-tools/test-image-user-uid-group:latest": dataclasses.replace(
            _labelled("uid-group", "uid-group"), user="1003:1003"),
        "k8s-staging-cri-tools/test-image-user-username-group:latest": dataclasses.replace(
            _labelled("username-group", "username-group"), user="www-data:www-data"),
    }
    for i in (1, 2, 3):
        specs[f"k8s-staging-cri-tools/test-image-{i}:latest"] = _labelled(f"n{i}", f"image-{i}")
        specs[f"k8s-staging-cri-tools/test-image-tags:{i}"] = _labelled("tags", "tags")
    reg = Registry(tmp_path_factory.mktemp("critest-registry"))
    try:
        for target, spec in specs.items():
            built = images.get(spec)
            name, tag = target.rsplit(":", 1)
            reg.push(built.oci_dir, spec.tag, name, tag)
        manifest = f"http://{reg.host}/v2/k8s-staging-cri-tools/test-image-digest/manifests/latest"
        req = urllib.request.Request(manifest, method="HEAD",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
        digest = urllib.request.urlopen(req, timeout=10).headers["Docker-Content-Digest"]
        yield Mirror(reg, f"{fw.IMAGE_DIGEST_REPO}@{digest}")
    finally:
        reg.stop()


def _conflist(root: Path) -> tuple[dict, str]:
    bridge = unique("cb")
    n = (os.getpid() + len(str(root))) % 250
    return {"cniVersion": "0.4.0", "name": f"critest-{bridge}", "plugins": [
        {"type": "bridge", "bridge": bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
         "ipam": {"type": "host-local", "dataDir": str(root / "ipam"),
                  "ranges": [[{"subnet": f"10.{161 + n % 40}.{n}.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
        {"type": "loopback"}]}, bridge


def _nat_chains() -> set[str]:
    p = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True, check=False)
    return {line[1:].split()[0] for line in p.stdout.splitlines() if line.startswith(":")}


def _drop_new_hostport_chains(before: set[str]) -> None:
    """portmap installs CNI-HOSTPORT-* chains and jumps from the builtin chains the first time it runs;
    if this session made them, take them away again (empty ones only: others' rules stay)."""
    new = sorted(c for c in _nat_chains() - before if c.startswith("CNI-"))
    rules = subprocess.run(["iptables-save", "-t", "nat"], capture_output=True, text=True, check=False).stdout
    for line in rules.splitlines():
        if line.startswith("-A ") and any(f"-j {c}" in line for c in new):
            subprocess.run(["iptables", "-t", "nat", "-D", *shlex.split(line[3:])],
                           capture_output=True, check=False)
    for c in new:
        subprocess.run(["iptables", "-t", "nat", "-F", c], capture_output=True, check=False)
    for c in new:
        subprocess.run(["iptables", "-t", "nat", "-X", c], capture_output=True, check=False)


class Runtime:
    """One CRI runtime under test, with the name the results table uses."""

    def __init__(self, name: str, daemon, bridge: str) -> None:
        self.name, self.daemon, self.bridge = name, daemon, bridge

    @property
    def client(self):
        return self.daemon.client

    def drop_cgroups(self, parents: list[str]) -> list[str]:
        from kernel.cgroups import detect_cgroups

        with open("/proc/self/mounts") as f:
            roots = {line.split()[1] for line in f if line.split()[2] in ("cgroup", "cgroup2")}
        info = detect_cgroups()
        ours = set(info.v1_controllers.values()) if info.version == "v1" else {info.v2_root}
        left = []
        for parent in parents:
            for r in roots:
                p = Path(r + parent)
                if p.exists():
                    # runc makes the parent in every hierarchy and leaves it (kubelet owns pod cgroups);
                    # ours must remove what it made
                    if self.name == "nodeagent" and r in ours:
                        left.append(str(p))
                    remove_cgroup(p)
        return left


@pytest.fixture(scope="session", params=RUNTIMES)
def runtime(request, tmp_path_factory, images, critest_registry):
    from tests.integration.cri.containerd import Containerd, available
    from tests.integration.cri.daemon import CRIDaemon, mounts_under

    name = request.param
    root = tmp_path_factory.mktemp(f"critest-{name}")
    host = critest_registry.registry.host
    conf, bridge = _conflist(root)
    chains = _nat_chains()
    d: CRIDaemon | Containerd
    if name == "nodeagent":
        d = CRIDaemon(root, network=False)
        d.registries = root / "registries.yaml"
        d.registries.write_text(json.dumps({"mirrors": {
            "registry.k8s.io": {"endpoint": [f"http://{host}"]},
            "gcr.io": {"endpoint": [f"http://{host}"]}}}))
    else:
        why = available()
        if why:
            pytest.skip(why)
        d = Containerd(root)
        d.extra_config = textwrap.dedent(f"""
            [plugins."io.containerd.grpc.v1.cri".registry.mirrors."registry.k8s.io"]
              endpoint = ["http://{host}"]
            [plugins."io.containerd.grpc.v1.cri".registry.mirrors."gcr.io"]
              endpoint = ["http://{host}"]
            """)
    d.cni_conf.mkdir(parents=True, exist_ok=True)
    (d.cni_conf / "10-critest.conflist").write_text(json.dumps(conf))
    d.start()
    try:
        if isinstance(d, Containerd):
            from cri.runtime.service import RuntimeOptions

            d.import_images(images, RuntimeOptions(state_dir=root).pause, [])
        yield Runtime(name, d, bridge)
    finally:
        if d.client is not None:
            for s in d.client.list_pod_sandbox():
                try:
                    d.client.stop_pod_sandbox(s.id)
                    d.client.remove_pod_sandbox(s.id)
                except grpc.RpcError:
                    pass
        d.stop()
        subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)
        _drop_new_hostport_chains(chains)
        left_chains = sorted(c for c in _nat_chains() - chains if c.startswith("CNI-"))
        assert not left_chains, f"portmap chains left behind: {left_chains}"
        if name == "nodeagent":
            left = mounts_under(root)
            assert not left, f"mounts left behind: {left}"


@pytest.fixture
def f(runtime, request, tmp_path):
    """One spec: the runtime's client and the spec's clean-up (critest's AfterEach)."""
    mark = request.node.get_closest_marker("containerd_fails")
    if mark and runtime.name == "containerd":
        request.node.add_marker(pytest.mark.xfail(reason=f"containerd 1.6: {mark.args[0]}", strict=True))
    if request.node.get_closest_marker("xfail_ours") and runtime.name == "nodeagent":
        request.node.add_marker(pytest.mark.xfail(reason=OURS_GAPS[request.node.originalname], strict=True))
    spec = fw.Spec(runtime, tmp_path)
    try:
        yield spec
    finally:
        spec.close()


@pytest.fixture
def mirror(critest_registry) -> Mirror:
    return critest_registry


# Specs our runtime does not pass yet, each with why (reported in the table as xfail on nodeagent).
OURS_GAPS: dict[str, str] = {
}


def containerd_fails(reason: str):
    """A spec containerd 1.6 is known to fail (strict xfail there; ours must pass)."""
    return pytest.mark.containerd_fails(reason)


# -- the per-spec results table -------------------------------------------------------------------
_RESULTS: dict[str, dict[str, str]] = {}


def pytest_configure(config):
    config.addinivalue_line("markers", "containerd_fails(reason): containerd 1.6 fails this critest spec")
    config.addinivalue_line("markers", "xfail_ours: a known gap of our runtime, reason in OURS_GAPS")


def pytest_runtest_logreport(report):
    if "tests/conformance/cri/" not in report.nodeid or "[" not in report.nodeid:
        return
    spec, _, params = report.nodeid.rpartition("[")
    parts = params.rstrip("]").split("-")
    param = next((p for p in parts if p in RUNTIMES), None)
    if param is None:
        return
    rest = "-".join(p for p in parts if p != param)
    spec = spec.split("tests/conformance/cri/", 1)[1] + (f"[{rest}]" if rest else "")
    row = _RESULTS.setdefault(spec, {})
    if hasattr(report, "wasxfail"):
        outcome = "xfail" if report.skipped else "XPASS"
    elif report.skipped:
        outcome = "skip"
    elif report.failed:
        outcome = "FAIL"
    else:
        outcome = "pass" if report.when == "call" else row.get(param, "")
    if report.when == "call" or report.outcome != "passed":
        if row.get(param) not in ("FAIL", "XPASS"):
            row[param] = outcome


def pytest_terminal_summary(terminalreporter):
    if not _RESULTS:
        return
    tr = terminalreporter
    tr.section("critest specs: nodeagent vs containerd 1.6")
    width = min(110, max(len(s) for s in _RESULTS))
    totals: dict[str, dict[str, int]] = {r: {} for r in RUNTIMES}
    for spec in sorted(_RESULTS):
        row = _RESULTS[spec]
        ours, theirs = row.get("nodeagent", "-"), row.get("containerd", "-")
        tr.write_line(f"{spec[:width]:<{width}}  {ours:>6}  {theirs:>6}")
        for r in RUNTIMES:
            o = row.get(r, "-")
            totals[r][o] = totals[r].get(o, 0) + 1
    for r in RUNTIMES:
        tr.write_line(f"{r}: " + ", ".join(f"{k} {v}" for k, v in sorted(totals[r].items())))
