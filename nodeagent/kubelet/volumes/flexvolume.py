"""FlexVolume: volumes whose setup is an executable's job (the kubelet's pkg/volume/flexvolume).

A driver `vendor/name` is the executable `<plugin dir>/vendor~name/name` (kubelet's --volume-plugin-dir).
Drivers are found when dropped in: every lookup re-reads the plugin dir and calls `init` on a driver that is
new or whose executable changed (the kubelet's dynamic prober does the same on inotify events); a driver
whose `init` fails is not a plugin. Calls follow the FlexVolume contract, each answering one JSON status
(`Success`, `Failure` or `Not supported`, with the command's fields) on stdout+stderr:

    init
    attach <json options> <node>            waitforattach <device> <json options>
    mountdevice <device mount dir> <device> <json options>
    mount <mount dir> <json options>        unmount <mount dir>
    unmountdevice <device mount dir>        detach <volume name> <node>

`attach`…`mountdevice` and `unmountdevice`/`detach` are called only for a driver whose `init` says
`"attach": true` (the default, as kubelet assumes); this kubelet attaches itself (as kubelet with
--enable-controller-attach-detach=false). A command the driver answers `Not supported` falls back to
kubelet's default for it (a bind mount of the device mount dir for `mount`, a plain unmount for `unmount`)
and is not asked again. The options carry `kubernetes.io/fsType`, `kubernetes.io/readwrite`,
`kubernetes.io/pvOrVolumeName`, the pod's name, namespace, uid and ServiceAccount, `fsGroup`, the
source's own `options`, and the `secretRef`'s keys (base64) as `kubernetes.io/secret/<key>`.

Blocking (subprocess): the volume manager calls it from a worker thread.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import os
import subprocess
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nodeagent.kubelet.volumes import mount as mnt
from nodeagent.kubelet.volumes import ownership
from nodeagent.kubelet.volumes.payloads import Getter, VolumeSourceError
from nodeagent.kubelet.volumes.plugins import PluginVolume

log = logging.getLogger("nodeagent.kubelet.flexvolume")

PLUGIN_NAME = "kubernetes.io/flexvolume"
DEFAULT_PLUGIN_DIR = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec"
NOT_SUPPORTED = "Not supported"
SUCCESS = "Success"
WAIT_FOR_ATTACH_TIMEOUT = 600.0  # seconds (the kubelet's waitForAttachTimeout: 10 minutes)

# the option keys kubelet passes (driver-call.go)
OPT_FS_TYPE = "kubernetes.io/fsType"
OPT_READ_WRITE = "kubernetes.io/readwrite"
OPT_SECRET = "kubernetes.io/secret"
OPT_FS_GROUP = "kubernetes.io/mounterArgs.FsGroup"
OPT_VOLUME_NAME = "kubernetes.io/pvOrVolumeName"
OPT_POD_NAME = "kubernetes.io/pod.name"
OPT_POD_NAMESPACE = "kubernetes.io/pod.namespace"
OPT_POD_UID = "kubernetes.io/pod.uid"
OPT_SERVICE_ACCOUNT = "kubernetes.io/serviceAccount.name"

Runner = Callable[[list[str], float | None], tuple[int, bytes]]  # argv, timeout → (exit code, stdout+stderr)


class DriverError(VolumeSourceError):
    """A driver call failed; the message is kubelet's (`mount command failed, status: Failure, reason: …`)."""


class StepError(DriverError):
    """A driver step before `mount` failed: the kubelet names the step in its event."""

    def __init__(self, message: str, operation: str, reason: str) -> None:
        super().__init__(message)
        self.operation = operation
        self.reason = reason


class NotSupported(DriverError):
    def __init__(self) -> None:
        super().__init__(NOT_SUPPORTED)


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What `init` says the driver does; a field it leaves out keeps kubelet's default."""

    attach: bool = True
    selinux_relabel: bool = True
    supports_metrics: bool = False
    fs_group: bool = True
    requires_fs_resize: bool = True


@dataclasses.dataclass(frozen=True)
class DriverStatus:
    status: str
    message: str = ""
    device: str = ""
    volume_name: str = ""
    attached: bool = False
    capabilities: Capabilities = Capabilities()


def escape(driver: str) -> str:
    """EscapeQualifiedName: vendor/name → vendor~name (the plugin dir's and the pod volume dir's name)."""
    return driver.replace("/", "~")


def unescape(name: str) -> str:
    return name.replace("~", "/")


def parse_status(command: str, output: bytes) -> DriverStatus:
    """handleCmdResponse: the JSON status, or DriverError (NotSupported for `Not supported`)."""
    try:
        raw = json.loads(output)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
    except ValueError as e:
        text = output.decode(errors="replace").strip()
        raise DriverError(f"{command} command failed: the driver's output is not a JSON status ({e}): "
                          f"{text[:300]!r}") from None
    status = str(raw.get("status", ""))
    if status == NOT_SUPPORTED:
        raise NotSupported()
    if status != SUCCESS:
        raise DriverError(f"{command} command failed, status: {status}, reason: {raw.get('message', '')}")
    caps = raw.get("capabilities") or {}
    defaults = Capabilities()
    return DriverStatus(
        status=status, message=str(raw.get("message", "")), device=str(raw.get("device", "")),
        volume_name=str(raw.get("volumeName", "")), attached=bool(raw.get("attached", False)),
        capabilities=Capabilities(
            attach=bool(caps.get("attach", defaults.attach)),
            selinux_relabel=bool(caps.get("selinuxRelabel", defaults.selinux_relabel)),
            supports_metrics=bool(caps.get("supportsMetrics", defaults.supports_metrics)),
            fs_group=bool(caps.get("fsGroup", defaults.fs_group)),
            requires_fs_resize=bool(caps.get("requiresFSResize", defaults.requires_fs_resize))))


def run_executable(argv: list[str], timeout: float | None) -> tuple[int, bytes]:
    """Run a driver (its combined output, as kubelet reads it); a timeout is a failed call."""
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                           check=False)
    except subprocess.TimeoutExpired:
        raise DriverError(f"{argv[1] if len(argv) > 1 else argv[0]} command failed: timeout") from None
    except OSError as e:
        raise DriverError(f"{argv[1] if len(argv) > 1 else argv[0]} command failed: {argv[0]}: "
                          f"{e.strerror}") from None
    return p.returncode, p.stdout


class Driver:
    """One driver executable, its capabilities and the commands it said it does not support."""

    def __init__(self, name: str, executable: str, runner: Runner = run_executable) -> None:
        self.name = name
        self.executable = executable
        self.runner = runner
        self.capabilities = Capabilities()
        self._unsupported: set[str] = set()
        self._lock = threading.Lock()

    def init(self) -> None:
        self.capabilities = self.call("init").capabilities

    def call(self, command: str, *args: str, timeout: float | None = None) -> DriverStatus:
        with self._lock:
            if command in self._unsupported:
                raise NotSupported()
        code, out = self.runner([self.executable, command, *args], timeout)
        try:
            status = parse_status(command, out)
        except NotSupported:
            with self._lock:
                self._unsupported.add(command)
            raise
        except DriverError:
            log.warning("FlexVolume: driver call failed: executable: %s, args: %s, exit %d, output: %r",
                        self.executable, [command, *args], code, out[:500])
            raise
        if code != 0:  # exec error with a Success answer: a driver bug, as kubelet says
            raise DriverError(f"{command} command failed: {self.executable} exited with status {code}")
        return status


class DriverProber:
    """The drivers under the plugin dir, found when dropped in and re-initialised when their executable
    changes (the kubelet's flexvolume prober)."""

    def __init__(self, plugin_dir: str | os.PathLike, runner: Runner = run_executable) -> None:
        self.plugin_dir = Path(plugin_dir)
        self.runner = runner
        self._drivers: dict[str, tuple[tuple[int, int], Driver | None]] = {}  # dir name → (signature, driver)
        self._lock = threading.Lock()

    def probe(self) -> dict[str, Driver]:
        """Every driver whose `init` succeeded, by driver name (vendor/name)."""
        with self._lock:
            seen: dict[str, tuple[tuple[int, int], Driver | None]] = {}
            try:
                entries = sorted(os.scandir(self.plugin_dir), key=lambda e: e.name)
            except FileNotFoundError:
                entries = []
            for entry in entries:
                if entry.name.startswith(".") or not entry.is_dir():
                    continue
                exe = Path(entry.path, entry.name.split("~")[-1])
                try:
                    st = exe.stat()
                except FileNotFoundError:
                    continue
                if not os.access(exe, os.X_OK):
                    continue
                sig = (st.st_mtime_ns, st.st_ino)
                known = self._drivers.get(entry.name)
                if known is not None and known[0] == sig:
                    seen[entry.name] = known
                    continue
                driver: Driver | None = Driver(unescape(entry.name), str(exe), self.runner)
                try:
                    assert driver is not None
                    driver.init()
                    log.info("FlexVolume driver %s found at %s (attach: %s)", driver.name, exe,
                             driver.capabilities.attach)
                except DriverError as e:
                    log.warning("FlexVolume driver %s at %s: init failed, not used: %s", entry.name, exe, e)
                    driver = None
                seen[entry.name] = (sig, driver)
            self._drivers = seen
            return {d.name: d for _, d in seen.values() if d is not None}

    def driver(self, name: str, volume: str) -> Driver:
        d = self.probe().get(name)
        if d is None:
            raise VolumeSourceError(f'failed to get Plugin from volumeSpec for volume "{volume}" err=no '
                                    f"volume plugin matched (no FlexVolume driver {name} under "
                                    f"{self.plugin_dir})")
        return d


def options_for_driver(source: Mapping[str, Any], volume_name: str, read_only: bool,
                       extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """NewOptionsForDriver: fsType, readwrite, the volume's name, the extra options, the source's own."""
    out = {OPT_FS_TYPE: str(source.get("fsType") or ""), OPT_READ_WRITE: "ro" if read_only else "rw",
           OPT_VOLUME_NAME: volume_name}
    out.update(extra or {})
    out.update({str(k): str(v) for k, v in (source.get("options") or {}).items()})
    return out


class FlexVolumePlugin:
    """Sets up and tears down flex volumes through their drivers (a `VolumePlugin`)."""

    def __init__(self, prober: DriverProber, kubelet_root: str | os.PathLike, node_name: str = "",
                 get_secret: Getter | None = None) -> None:
        self.prober = prober
        self.root = Path(kubelet_root)
        self.node_name = node_name
        self.get_secret = get_secret

    def device_mount_path(self, driver: str, name: str) -> Path:
        """<root>/plugins/kubernetes.io/flexvolume/<vendor>/<driver>/mounts/<volume>, as kubelet's."""
        return self.root / "plugins" / PLUGIN_NAME / driver / "mounts" / name

    def dir_name(self, volume: PluginVolume) -> str:
        return escape(_driver(volume))

    def owns(self, dir_name: str) -> bool:
        return not dir_name.startswith("kubernetes.io~")  # every <vendor>~<driver> dir

    def supports_metrics(self, target: Path) -> bool:
        driver = self.prober.probe().get(unescape(target.parent.name))
        return driver is not None and driver.capabilities.supports_metrics

    def _secret_options(self, spec: PluginVolume) -> dict[str, str]:
        ref = spec.source.get("secretRef") or {}
        name = ref.get("name") or ""
        if not name:
            return {}
        ns = ref.get("namespace") or spec.namespace
        secret = self.get_secret(ns, name) if self.get_secret else None
        if secret is None:
            raise VolumeSourceError(f'couldn\'t get secret {ns}/{name} err: secrets "{name}" not found')
        if secret.get("type") != _driver(spec):  # util.GetSecretForPV: the secret's type names the driver
            raise VolumeSourceError(f"couldn't get secret {ns}/{name} err: Cannot get secret of type "
                                    f"{_driver(spec)}")
        data = secret.get("data") or {}
        # the Secret's data is base64 already; kubelet passes each value base64-encoded
        return {f"{OPT_SECRET}/{k}": base64.b64encode(base64.b64decode(v)).decode() for k, v in data.items()}

    def setup(self, pod: Mapping[str, Any], spec: PluginVolume, target: Path) -> None:
        """Attach and mount the device where the driver attaches, then `mount` at target; fsGroup ownership
        where the driver allows it. A failure leaves no mount and no target dir behind."""
        if not _driver(spec):
            raise VolumeSourceError("flexVolume.driver is empty")
        driver = self.prober.driver(_driver(spec), spec.name)
        if mnt.is_mountpoint(target):
            return  # mount only once
        meta = pod.get("metadata") or {}
        gid, _ = ownership.fs_group(pod)
        extra = {OPT_POD_NAME: meta.get("name", ""), OPT_POD_NAMESPACE: meta.get("namespace") or "default",
                 OPT_POD_UID: meta.get("uid", ""),
                 OPT_SERVICE_ACCOUNT: (pod.get("spec") or {}).get("serviceAccountName") or "default"}
        extra.update(self._secret_options(spec))
        if gid is not None:
            extra[OPT_FS_GROUP] = str(gid)
        if driver.capabilities.attach:
            self._attach_and_mount_device(driver, spec)
        target.mkdir(parents=True, exist_ok=True, mode=0o750)
        try:
            try:
                driver.call("mount", str(target),
                            json.dumps(options_for_driver(spec.source, spec.name, spec.read_only, extra)))
            except NotSupported:  # mounterDefaults: bind the device mount dir
                mnt.mount_bind(self.device_mount_path(_driver(spec), spec.name), target)
        except Exception:
            _remove_empty_dir(target)
            raise
        if not spec.read_only and driver.capabilities.fs_group and gid is not None:
            ownership.set_volume_ownership(target, gid, False)  # fsGroupChangePolicy does not apply

    def _attach_and_mount_device(self, driver: Driver, spec: PluginVolume) -> None:
        options = json.dumps(options_for_driver(spec.source, spec.name, spec.read_only))
        try:
            device = driver.call("attach", options, self.node_name).device
        except NotSupported:
            device = ""
        except DriverError as e:
            raise StepError(str(e), "AttachVolume.Attach", "FailedAttachVolume") from None
        try:
            device = driver.call("waitforattach", device, options, timeout=WAIT_FOR_ATTACH_TIMEOUT).device
        except NotSupported:
            pass
        except DriverError as e:
            raise StepError(str(e), "MountVolume.WaitForAttach", "FailedMount") from None
        dmp = self.device_mount_path(_driver(spec), spec.name)
        if mnt.is_mountpoint(dmp):
            return
        dmp.mkdir(parents=True, exist_ok=True, mode=0o750)
        try:
            try:
                driver.call("mountdevice", str(dmp), device, options)
            except NotSupported:
                if device:  # attacherDefaults.MountDevice: mount the device itself
                    mnt.mount_device(device, dmp, str(spec.source.get("fsType") or "ext4"), spec.read_only)
        except (DriverError, OSError) as e:
            _remove_empty_dir(dmp)
            raise StepError(str(e), "MountVolume.MountDevice", "FailedMount") from None

    def teardown(self, target: Path) -> None:
        """`unmount` the pod's volume dir (a plain unmount when not supported), remove it; then, for an
        attaching driver and when no other pod uses the volume, `unmountdevice` and `detach`. A driver that
        is gone leaves the plain unmount (the kubelet's reconstruction falls back the same way)."""
        driver_name = unescape(target.parent.name)
        driver = self.prober.probe().get(driver_name)
        if target.exists():
            try:
                if driver is None:
                    raise NotSupported()
                driver.call("unmount", str(target))
            except NotSupported:
                mnt.unmount(target)
            if mnt.is_mountpoint(target):
                raise DriverError(f"unmount of {target} left it mounted")
            _remove_empty_dir(target)
        if driver is None or not driver.capabilities.attach:
            return
        name = target.name
        if self._in_use_elsewhere(target):
            return
        dmp = self.device_mount_path(driver_name, name)
        if dmp.exists():
            try:
                driver.call("unmountdevice", str(dmp))
            except NotSupported:
                mnt.unmount(dmp)
            _remove_empty_dir(dmp)
        try:
            driver.call("detach", name, self.node_name)
        except NotSupported:
            pass

    def _in_use_elsewhere(self, target: Path) -> bool:
        """Another pod still has this volume (GetDeviceMountRefs, read from the pods' volume dirs)."""
        plugin_dir, name = target.parent.name, target.name
        pods = self.root / "pods"
        if not pods.is_dir():
            return False
        others = (p / "volumes" / plugin_dir / name for p in pods.iterdir())
        return any(o != target and o.exists() for o in others)


def _driver(volume: PluginVolume) -> str:
    return str(volume.source.get("driver") or "")


def _remove_empty_dir(path: Path) -> None:
    try:
        path.rmdir()
    except FileNotFoundError:
        pass
    except OSError as e:
        log.warning("FlexVolume: %s not removed: %s", path, e.strerror)
