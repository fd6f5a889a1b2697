"""`nodeagent reset [--data-dir DIR] [--all]`: stop every pod of a node and remove what the node made
(kubeadm reset, k3s-killall.sh).

Pods outlive `up` by design (as containers outlive containerd's restarts); this is how a person gets rid of
them. The pods are stopped through our runtime, started here on the node's own state for the purpose
(graceful stop, then forced, with the CNI DEL that frees each address), then the kernel objects the node's
components made go: what is left in its cgroup tree, the pod bridge and IPAM allocations, the masquerade and
NetworkPolicy rules and (for the default instance) the Service rules, the ingress HAProxy, and the routes,
tunnel and masquerade exemption of a multi-node pod network. With --all, the data dir (store, PKI, images)
and the cluster's context in the invoking user's kubeconfig go too. Every step tolerates what is already
gone, so a second reset does nothing and succeeds. A reset refuses while an `up`/`agent` still runs on the
data dir, naming its pid.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import socket
import struct
import sys
from pathlib import Path

from nodeagent.layout import DEFAULT_DATA_DIR, Layout

log = logging.getLogger("nodeagent.reset")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help="the node's state directory, as given to `up`/`agent` (default: %(default)s)")
    p.add_argument("--all", action="store_true",
                   help="also remove the data dir: the cluster's store, PKI, kubeconfigs and images")
    p.add_argument("--bridge", default=None,
                   help="the pod bridge (default: the one the node's CNI config names, else the data dir's)")
    p.add_argument("--cgroup-root", default=None,
                   help="the cgroup root, if `up` was given --cgroup-root (default: the data dir's)")
    p.add_argument("--cni-bin-dir", action="append", default=None,
                   help="CNI plugin directory for the pods' CNI DEL, repeatable (default: /opt/cni/bin and "
                        "/usr/lib/cni)")
    p.add_argument("--cluster-cidr", default=None,
                   help="the pod network's range, if `up`/`agent` was given --cluster-cidr: its routes, "
                        "tunnel and masquerade exemption go (default: the data dir's)")
    p.add_argument("--write-kubeconfig", metavar="PATH", default=None,
                   help="with --all: also take the cluster's context out of this kubeconfig, as given to "
                        "`up --write-kubeconfig` (the invoking user's ~/.kube/config always is)")
    p.add_argument("--grace-period", type=int, default=10,
                   help="seconds each container gets after SIGTERM before SIGKILL (default: %(default)s)")


def holder_pid(layout: Layout) -> int | None:
    """The pid of a process serving this data dir: the one holding its store's lock (`up`, `server`) or
    answering on its CRI socket (`up`, `agent`, `cri`); None when nothing runs."""
    lock = Path(layout.data_dir, "store.db.lock")
    if lock.exists():
        pid = _flock_holder(lock)
        if pid is not None:
            return pid
    return _socket_peer(layout.cri_socket)


def _flock_holder(path: Path) -> int | None:
    """Who holds a flock on `path`, from /proc/locks ("1: FLOCK ADVISORY WRITE <pid> <maj>:<min>:<ino> …")."""
    st = path.stat()
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in Path("/proc/locks").read_text().splitlines():
        f = line.split()
        if len(f) > 5 and f[1] == "FLOCK" and f[5] == ident and f[4].isdigit():
            return int(f[4])
    return None


def _socket_peer(path: str) -> int | None:
    """The pid of the process accepting on a unix socket (SO_PEERCRED), None when none accepts."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(2)
        try:
            s.connect(path)
        except OSError:
            return None
        pid, _uid, _gid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                           struct.calcsize("3i")))
        return pid or None


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    return "?"


async def stop_pods(layout: Layout, cni_bin_dirs: tuple[str, ...], grace: int) -> tuple[int, int]:
    """Start our runtime on the node's state, stop and remove every sandbox through it; how many were
    removed and how many the runtime refused."""
    import grpc

    from cri.client import RuntimeClient
    from cri.config import CRIConfig
    from cri.service import serve

    sock = str(Path(layout.cri_state_dir, "reset.sock"))  # not the node's: nothing else finds it
    cfg = CRIConfig(socket=sock, state_dir=layout.cri_state_dir, image_dir=layout.image_dir,
                    cni_conf_dir=layout.cni_conf_dir, cni_bin_dirs=cni_bin_dirs)
    ready = asyncio.Event()
    removed = failed = 0
    async with asyncio.TaskGroup() as tg:
        runtime = tg.create_task(serve(cfg, ready))
        waiter = tg.create_task(ready.wait())
        await asyncio.wait([runtime, waiter], return_when=asyncio.FIRST_COMPLETED)
        if runtime.done():
            waiter.cancel()
            runtime.result()  # the runtime's own error
        client = RuntimeClient(f"unix://{sock}", timeout=grace + 60.0)
        try:
            for sb in await client.list_pod_sandbox():
                name = f"{sb.metadata.namespace}/{sb.metadata.name}"
                try:
                    for c in await client.list_containers(pod_sandbox_id=sb.id):
                        # StopContainer: SIGTERM (or the image's STOPSIGNAL), SIGKILL after the grace period
                        await client.stop_container(c.id, grace)
                    await client.stop_pod_sandbox(sb.id)
                    await client.remove_pod_sandbox(sb.id)
                except grpc.aio.AioRpcError as e:
                    # its processes are killed with the cgroup tree below; the runtime's reason is shown
                    print(f"pod {name}: the runtime could not remove it: {e.details()}; its processes are "
                          "killed with the node's cgroups", file=sys.stderr)
                    failed += 1
                    continue
                removed += 1
                print(f"pod {name}: stopped and removed (sandbox {sb.id[:13]})")
        finally:
            await client.close()
            runtime.cancel()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sock)
    return removed, failed


def configured_bridge(layout: Layout) -> str | None:
    """The bridge our conflist names (`up --bridge` chose it), None without one."""
    import json

    from cni.install import CONFLIST_NAME

    try:
        conf = json.loads(Path(layout.cni_conf_dir, CONFLIST_NAME).read_text())
    except (OSError, ValueError):
        return None
    for plugin in conf.get("plugins", []) if isinstance(conf, dict) else []:
        if isinstance(plugin, dict) and isinstance(plugin.get("bridge"), str):
            return str(plugin["bridge"])
    return None


def remove_node_objects(layout: Layout, bridge: str, cgroup_root: str) -> None:
    """Everything the node's components made in the kernel and on disk outside the runtime's state, each
    already-gone part skipped."""
    from cni.install import CONFLIST_NAME
    from kernel.cgroups.tree import kill_tree
    from kernel.netlink import IPRoute, delete_link
    from nodeagent.kubelet import resources

    parts = tuple(p for p in cgroup_root.split("/") if p)
    # what the runtime did not stop (a process left in a pod cgroup) is killed; the tree goes bottom-up
    tree = "/".join(parts) if parts else resources.node_allocatable_cgroup(()).cgroupfs().strip("/")
    kill_tree(tree)
    if Path("/sys/class/net", bridge).exists():
        with IPRoute() as ipr:
            delete_link(ipr, bridge)
        print(f"bridge {bridge}: removed")
    _masquerade_rules(layout.network_name)
    shutil.rmtree(Path(layout.cni_ipam_dir, layout.network_name), ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(Path(layout.cni_conf_dir, CONFLIST_NAME))
    _netpol_rules(layout)
    _bird(layout)
    if layout.is_default:
        _service_rules()
    # a throwaway instance's Service rules went when it stopped (netproxy's cleanup_on_stop); the KUBE-
    # chains are shared by every instance on the host, so a reset of one does not touch them


def _bird(layout: Layout) -> None:
    """The bgp pod network's BIRD, when a killed agent left it running: SIGTERM (it withdraws its routes)."""
    from nodeagent.nodenet.bird import Bird

    bird = Bird(layout.bird_dir)
    if asyncio.run(bird.stop_left_over()):
        print(f"BIRD of {layout.bird_dir}: stopped")


def _masquerade_rules(network: str) -> None:
    """The bridge plugin's masquerade chain of this network (its CNI DEL removes it with the last pod)."""
    from cni.masq import Cache, remove
    from kernel.iptables import backend

    remove(backend(), network, Cache())


def _netpol_rules(layout: Layout) -> None:
    from netpol.enforcer import make_backend

    for mode, kw in (("iptables", {"chain_prefix": layout.netpol_chain_prefix,
                                   "set_prefix": layout.netpol_set_prefix}),
                     ("nftables", {"table": layout.netpol_table})):
        try:
            make_backend(mode, **kw).cleanup()
        except Exception as e:  # a mode this host lacks has nothing to remove
            log.debug("netpol %s cleanup: %s", mode, e)


def _service_rules() -> None:
    from netproxy.backends import make_proxier
    from netproxy.proxier import NodeConfig

    for mode in ("iptables", "nftables", "ipvs"):
        try:
            make_proxier(mode, NodeConfig(node_name="reset")).cleanup()
        except Exception as e:  # a mode this host lacks has nothing to remove
            log.debug("netproxy %s cleanup: %s", mode, e)


def remove_data_dir(layout: Layout) -> None:
    """--all: the data dir (store, PKI, kubeconfigs, images, runtime state) and the default instance's
    copy of the admin kubeconfig."""
    if layout.admin_kubeconfig_copy:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(layout.admin_kubeconfig_copy)
    if Path(layout.data_dir).exists():
        unmount_under(layout.data_dir)
        shutil.rmtree(layout.data_dir)
        print(f"data dir {layout.data_dir}: removed")


def unmount_under(root: str) -> None:
    """Detach every mount left under `root`, deepest first (a sandbox's shm or a rootfs whose runtime
    record was lost), so that removing the directory never reaches into a mounted filesystem — as
    kubeadm reset unmounts what is mounted under the kubelet's directory before removing it."""
    from kernel import syscalls
    from kernel.mounts import mountinfo

    top = os.path.realpath(root)
    points = [m.point for m in mountinfo() if m.point == top or m.point.startswith(top + "/")]
    for point in reversed(points):  # the kernel lists parents before children
        try:
            syscalls.umount(point, syscalls.MNT_DETACH)
        except OSError as e:
            log.warning("could not unmount %s: %s", point, e)
        else:
            print(f"mount {point}: detached")


def run(args: argparse.Namespace) -> int:
    from cri.config import DEFAULT_CNI_BIN_DIRS
    from nodeagent.commands.reset_extras import remove_pod_network, remove_user_context, stop_ingress_proxy
    from nodeagent.commands.up import no_grpc_fork_handlers

    layout = Layout.for_data_dir(os.path.abspath(args.data_dir))
    pid = holder_pid(layout)
    if pid is not None:
        print(f"nodeagent reset: pid {pid} ({_cmdline(pid)}) still runs on {layout.data_dir}; stop it "
              f"first (Ctrl-C, or kill {pid}), then reset", file=sys.stderr)
        return 1
    if args.grace_period < 0:
        print("nodeagent reset: --grace-period must not be negative", file=sys.stderr)
        return 2
    no_grpc_fork_handlers()
    failed = 0
    if Path(layout.cri_state_dir).is_dir():
        n, failed = asyncio.run(stop_pods(layout, tuple(args.cni_bin_dir or DEFAULT_CNI_BIN_DIRS),
                                          args.grace_period))
        print(f"{n} pod(s) stopped and removed")
    # the pods' volumes (projected tokens, secrets, emptyDir on tmpfs) are the kubelet's mounts
    unmount_under(layout.kubelet_root_dir)
    cgroup_root = layout.cgroup_root if args.cgroup_root is None else args.cgroup_root
    remove_node_objects(layout, args.bridge or configured_bridge(layout) or layout.bridge, cgroup_root)
    stop_ingress_proxy(layout)
    remove_pod_network(args.cluster_cidr or layout.cluster_cidr)
    if args.all:
        remove_user_context(layout, args.write_kubeconfig)
        remove_data_dir(layout)
    if failed:
        print(f"nodeagent reset: {failed} pod(s) the runtime could not remove (see above); run reset again",
              file=sys.stderr)
        return 1
    print(f"node of {layout.data_dir} reset")
    return 0
