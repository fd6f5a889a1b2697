"""What this host's kernel and tools support.

One probe serves `nodeagent doctor`, the components choosing a driver or mode,
and the test suite deciding what to skip: a feature is reported missing only
when the kernel (or a required tool) truly lacks it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess
import uuid
from pathlib import Path

from kernel import iptables
from kernel.cgroups import CgroupInfo, detect_cgroups


@dataclasses.dataclass(frozen=True)
class Feature:
    name: str
    available: bool
    detail: str = ""


def _filesystems() -> set[str]:
    try:
        with open("/proc/filesystems") as f:
            return {line.split()[-1] for line in f if line.strip()}
    except OSError:
        return set()


def _modprobe(module: str) -> None:
    """Best effort: load a module if the host has modprobe and the module; silence either lack."""
    if shutil.which("modprobe"):
        subprocess.run(["modprobe", "-q", module], capture_output=True, check=False, timeout=10)


def _run_ok(argv: list[str]) -> tuple[bool, str]:
    if not shutil.which(argv[0]):
        return False, f"{argv[0]} not installed"
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    said = (p.stderr or p.stdout).strip()
    return p.returncode == 0, said.splitlines()[-1] if said else ""


def probe_overlayfs() -> Feature:
    if "overlay" not in _filesystems():
        _modprobe("overlay")
    ok = "overlay" in _filesystems()
    return Feature("overlayfs", ok, "" if ok else "overlay not in /proc/filesystems")


def probe_ipvs() -> Feature:
    if not os.path.exists("/proc/net/ip_vs"):
        _modprobe("ip_vs")
    ok = os.path.exists("/proc/net/ip_vs")
    return Feature("ipvs", ok,
                   "" if ok else "kernel has no IPVS (/proc/net/ip_vs missing, ip_vs module not loadable)")


def probe_nftables() -> Feature:
    ok, detail = _run_ok(["nft", "list", "tables"])
    return Feature("nftables", ok, "" if ok else f"nft list tables failed: {detail}")


def probe_iptables_legacy() -> Feature:
    ok, detail = _run_ok(["iptables-legacy", "-w", "-t", "filter", "-S", "INPUT"])
    return Feature("iptables-legacy", ok, "" if ok else f"legacy x_tables unusable: {detail}")


def probe_iptables_nft() -> Feature:
    ok, detail = _run_ok(["iptables-nft", "-w", "-t", "filter", "-S", "INPUT"])
    return Feature("iptables-nft", ok, "" if ok else f"iptables-nft unusable: {detail}")


def _probe_link_kind(kind: str, extra: dict | None = None) -> Feature:
    """Create and delete a link of `kind` in the root netns; the name is unique and short-lived."""
    from kernel.netlink import IPRoute, NetlinkError, delete_link

    name = f"nap{uuid.uuid4().hex[:8]}"
    with IPRoute() as ipr:
        try:
            ipr.link("add", ifname=name, kind=kind, **(extra or {}))
        except NetlinkError as e:
            why = e.args[-1] if e.args else e
            return Feature(kind, False, f"kernel refused to create a link of kind {kind}: {why}")
        finally:
            delete_link(ipr, name)
    return Feature(kind, True)


def probe_vxlan() -> Feature:
    return _probe_link_kind("vxlan", {"vxlan_id": 4242, "vxlan_port": 4789})


def probe_ipip() -> Feature:
    """Calico-style IPIP tunnels (the cross-node `ipip` mode): the kernel needs the ipip module."""
    return _probe_link_kind("ipip", {"ipip_local": "127.0.0.1"})


def probe_dummy() -> Feature:
    return _probe_link_kind("dummy")


def probe_veth() -> Feature:
    return _probe_link_kind("veth", {"peer": f"nap{uuid.uuid4().hex[:8]}"})


def probe_bridge() -> Feature:
    return _probe_link_kind("bridge")


def probe_bird2() -> Feature:
    """BIRD 2, the routing daemon the `bgp` pod network runs on every node (Debian's bird2)."""
    if not shutil.which("bird"):
        return Feature("bird2", False, "no bird binary (Debian's bird2; make install adds it)")
    p = subprocess.run(["bird", "--version"], capture_output=True, text=True, check=False)
    said = (p.stderr or p.stdout).strip()
    if p.returncode != 0 or "version 2." not in said:
        return Feature("bird2", False, f"bird --version: {said or p.returncode} (BIRD 2 is needed)")
    return Feature("bird2", True, said)


def probe_user_namespaces() -> Feature:
    try:
        limit = int(Path("/proc/sys/user/max_user_namespaces").read_text())
    except (OSError, ValueError):
        limit = 0
    if limit <= 0:
        return Feature("user-namespaces", False, "user.max_user_namespaces is 0")
    ok, detail = _run_ok(["unshare", "--user", "true"])
    return Feature("user-namespaces", ok, "" if ok else f"unshare --user failed: {detail}")


def probe_oom_score_adj_lowering() -> Feature:
    """Whether we may lower oom_score_adj below our own (needs CAP_SYS_RESOURCE)."""
    try:
        cur = int(Path("/proc/self/oom_score_adj").read_text())
    except OSError:
        return Feature("oom-score-adj-lower", False, "cannot read /proc/self/oom_score_adj")
    if cur <= -1000:
        return Feature("oom-score-adj-lower", False, "already at -1000")
    p = subprocess.run(["sh", "-c", f"echo {cur - 1} > /proc/self/oom_score_adj"], capture_output=True,
                       text=True, check=False)
    ok = p.returncode == 0
    return Feature("oom-score-adj-lower", ok,
                   "" if ok else "no CAP_SYS_RESOURCE: oom_score_adj is clamped to the parent's "
                                 "(restrict_oom_score_adj)")


def probe_apparmor() -> Feature:
    """AppArmor is usable when the LSM is enabled and its securityfs interface is mounted."""
    enabled = Path("/sys/module/apparmor/parameters/enabled")
    if not enabled.exists() or enabled.read_text().strip() != "Y":
        return Feature("apparmor", False,
                       "the kernel has no AppArmor LSM enabled (/sys/module/apparmor absent)")
    if not Path("/sys/kernel/security/apparmor").exists():
        return Feature("apparmor", False, "securityfs has no apparmor directory")
    return Feature("apparmor", True)


def probe_selinux() -> Feature:
    if not Path("/sys/fs/selinux/enforce").exists():
        return Feature("selinux", False, "the kernel has no SELinux enabled (/sys/fs/selinux absent)")
    return Feature("selinux", True)


def probe_seccomp() -> Feature:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return Feature("seccomp", False, "cannot read /proc/self/status")
    ok = "Seccomp:" in status and Path("/proc/sys/kernel/seccomp/actions_avail").exists()
    return Feature("seccomp", ok, "" if ok else "the kernel was built without seccomp filters")


@dataclasses.dataclass(frozen=True)
class HostReport:
    kernel: str
    cgroups: CgroupInfo
    features: dict[str, Feature]

    def has(self, name: str) -> bool:
        f = self.features.get(name)
        return bool(f and f.available)

    def why_not(self, name: str) -> str:
        f = self.features.get(name)
        return f.detail if f else f"{name} was not probed"

    @property
    def iptables_backend(self) -> str:
        """The node's one iptables backend (kernel.iptables.backend)."""
        return iptables.backend()

    @property
    def proxy_mode(self) -> str:
        return "iptables"

    def as_dict(self) -> dict:
        return {
            "kernel": self.kernel,
            "cgroups": {
                "version": self.cgroups.version,
                "hybrid": self.cgroups.hybrid,
                "v1_controllers": sorted(self.cgroups.v1_controllers),
                "v2_root": self.cgroups.v2_root,
                "v2_controllers": list(self.cgroups.v2_controllers),
            },
            "features": {k: {"available": v.available, "detail": v.detail} for k, v in self.features.items()},
            "uses": self.uses(),
        }

    def uses(self) -> dict[str, str]:
        cg = "cgroupfs v1 (cgroupspy)" if self.cgroups.version == "v1" else "cgroupfs v2 (unified)"
        modes = ["iptables"] + (["nftables"] if self.has("nftables") else []) + (
            ["ipvs"] if self.has("ipvs") and self.has("dummy") else [])
        return {
            "cgroup driver": cg,
            "rootfs": "overlayfs" if self.has("overlayfs") else "copy (no overlayfs)",
            "iptables backend": f"{self.iptables_backend} (Services, CNI, NetworkPolicy; rules found: "
                                f"{iptables_rules_found()})",
            "proxy modes available": ", ".join(modes),
            "default proxy mode": self.proxy_mode,
            "cross-node networking": ", ".join(
                m for m, ok in (("host-gw", True), ("ipip", self.has("ipip")), ("vxlan", self.has("vxlan")),
                                ("bgp", self.has("bird2"))) if ok),
            "oom_score_adj": "as requested" if self.has("oom-score-adj-lower")
            else "clamped to the runtime's own (restrict_oom_score_adj)",
        }


def iptables_rules_found() -> str:
    """Which backend holds more rules now (legacy, nft, or none without either tool): an observation
    for the report, as the first iptables-wrapper counted rules; the decision is kernel.iptables."""
    def count(cmd: str) -> int:
        if not shutil.which(cmd):
            return -1
        p = subprocess.run([cmd], capture_output=True, text=True, check=False)
        if p.returncode != 0:
            return -1
        return sum(1 for line in p.stdout.splitlines() if line.startswith("-A "))

    legacy, nft = count("iptables-legacy-save"), count("iptables-nft-save")
    if legacy > nft and legacy > 0:
        return "legacy"
    if nft >= 0:
        return "nft"
    return "legacy" if legacy >= 0 else "none"


PROBES = {
    "overlayfs": probe_overlayfs,
    "ipvs": probe_ipvs,
    "nftables": probe_nftables,
    "iptables-legacy": probe_iptables_legacy,
    "iptables-nft": probe_iptables_nft,
    "veth": probe_veth,
    "bridge": probe_bridge,
    "vxlan": probe_vxlan,
    "ipip": probe_ipip,
    "dummy": probe_dummy,
    "bird2": probe_bird2,
    "user-namespaces": probe_user_namespaces,
    "oom-score-adj-lower": probe_oom_score_adj_lowering,
    "apparmor": probe_apparmor,
    "selinux": probe_selinux,
    "seccomp": probe_seccomp,
}

NEEDS_ROOT = {"veth", "bridge", "vxlan", "ipip", "dummy", "nftables", "iptables-legacy", "iptables-nft",
              "oom-score-adj-lower"}


@functools.cache
def probe_host() -> HostReport:
    features: dict[str, Feature] = {}
    root = os.geteuid() == 0
    for name, fn in PROBES.items():
        if name in NEEDS_ROOT and not root:
            features[name] = Feature(name, False, "not probed: needs root")
            continue
        try:
            features[name] = fn()
        except Exception as e:  # a probe that crashes reports the feature as unusable, with why
            features[name] = Feature(name, False, f"probe failed: {e}")
    return HostReport(kernel=os.uname().release, cgroups=detect_cgroups(), features=features)


def format_report(report: HostReport) -> str:
    lines = [f"kernel: {report.kernel}", f"cgroups: {report.cgroups.summary}", "features:"]
    for f in report.features.values():
        mark = "yes" if f.available else "no "
        lines.append(f"  {f.name:<22} {mark}{'  (' + f.detail + ')' if f.detail else ''}")
    lines.append("will use:")
    for k, v in report.uses().items():
        lines.append(f"  {k:<22} {v}")
    return "\n".join(lines)
