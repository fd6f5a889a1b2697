"""An independent CNI caller: Debian's podman 4.3 (CNI backend) runs a container on our network,
with a published port through our portmap.

Run in a private mount namespace with a tmpfs over /var/lib, because podman 4.3's CNI
backend keeps libcni's result cache in /var/lib/cni with no setting to move it, and
tests must not touch the host's /var/lib/cni. Root here lacks CAP_SYS_RESOURCE, so
the container's nofile/nproc limits are set at or below the current hard limits
(podman's defaults raise them and runc then fails with EPERM). Podman's cgroupfs manager puts
the container and its conmon under `--cgroup-parent` (default `libpod_parent`, which it creates on
first use and never removes): the test names a parent of its own and removes it afterwards.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.harness import firstuse
from tests.integration.cni.conftest import Net

pytestmark = [pytest.mark.root, pytest.mark.slow]

SCRIPT = """
set -e
mount --make-rprivate /
mount -t tmpfs tmpfs /var/lib
P="podman --root {t}/root --runroot {t}/run --storage-driver vfs"
trap '$P rm -f -t 0 {name} >/dev/null 2>&1 || true' EXIT
$P load -q -i {archive} >/dev/null
$P run -d --name {name} --cgroup-parent /{cgparent} --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 \\
  --network {net} -p {hp}:80 {image} >/dev/null
echo "IP $($P inspect -f '{{{{.NetworkSettings.Networks.{net}.IPAddress}}}}' {name})"
echo "PORTS $(ls /sys/class/net/{bridge}/brif | tr '\\n' ' ')"
echo "SEEN $($P exec {name} ip -4 -o addr show eth0)"
for i in 1 2 3 4 5 6 7 8 9 10; do
  if {py} -c "import urllib.request as u; u.urlopen('http://127.0.0.1:{hp}/', timeout=2).read()" 2>/dev/null
  then echo "HOSTPORT ok"; break; fi
  sleep 0.3
done
echo "RULES $(iptables-save -t nat 2>/dev/null | grep -c 'nodeagent/portmap net={net} ' || true)"
$P rm -f -t 0 {name} >/dev/null
echo "DONE"
"""


@pytest.fixture
def short_tmp():
    """podman refuses a runroot longer than 50 characters: pytest's tmp_path is too long."""
    d = tempfile.mkdtemp(prefix="napod", dir="/tmp")
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def test_podman_runs_a_container_on_our_network(cni_bin, net: Net, images, short_tmp, res):
    if not shutil.which("podman"):
        pytest.skip("podman is not installed")
    tmp_path = short_tmp
    netd = tmp_path / "netd"
    netd.mkdir()
    conflist = net.conflist({"type": "nodeagent-portmap", "capabilities": {"portMappings": True}})
    (netd / f"{net.name}.conflist").write_text(json.dumps(conflist))
    conf = tmp_path / "containers.conf"
    conf.write_text(f"""[network]
network_backend = "cni"
cni_plugin_dirs = ["{cni_bin}"]
network_config_dir = "{netd}"
[engine]
tmp_dir = "{tmp_path}/tmp"
lock_type = "file"
events_logger = "none"
cgroup_manager = "cgroupfs"
""")
    img = images.httpd
    hp = random.randint(20000, 60000)
    cgparent = res.cgroup_name()
    peer_cgroups_before = {a.path for a in firstuse.present() if a.what == "cgroup"}
    script = SCRIPT.format(t=tmp_path, cgparent=cgparent, archive=img.docker_archive,
                           name=f"c{net.name}", net=net.name,
                           image=img.ref, bridge=net.bridge, hp=hp, py=sys.executable)
    env = dict(os.environ, CONTAINERS_CONF=str(conf), NODEAGENT_CNI_SOCKET="none")
    p = subprocess.run(["unshare", "-m", "sh", "-c", script], env=env, capture_output=True,
                       text=True, timeout=240)
    assert p.returncode == 0 and "DONE" in p.stdout, p.stdout + p.stderr
    lines = dict(ln.split(" ", 1) for ln in p.stdout.splitlines() if " " in ln)
    ip = lines["IP"].strip()
    assert ip.startswith(str(net.subnet.network_address).rsplit(".", 1)[0] + ".")
    assert f"inet {ip}/24" in lines["SEEN"]                       # the container saw the address we assigned
    assert any(port.startswith("na") for port in lines["PORTS"].split())  # our veth was on our bridge
    assert lines.get("HOSTPORT") == "ok"                          # podman's -p went through our portmap
    assert int(lines["RULES"]) > 0
    net.assert_clean()                                            # podman's DEL removed all of it
    # podman's own cgroups went under our parent, not a default parent it would leave behind
    assert {a.path for a in firstuse.present() if a.what == "cgroup"} == peer_cgroups_before
    subprocess.run(["unshare", "-m", "sh", "-c", f"mount --make-rprivate /; mount -t tmpfs tmpfs /var/lib; "
                    f"podman --root {tmp_path}/root --runroot {tmp_path}/run --storage-driver vfs "
                    "system reset -f"],
                   env=env, capture_output=True, timeout=120)
