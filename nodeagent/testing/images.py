"""Build container images locally from Debian's busybox-static, with no network.

Writes OCI image layouts and docker-archive tarballs that the runtime (and
skopeo, podman, containerd) can import or a local registry can serve. Builds
are deterministic (fixed mtimes, gzip without a timestamp), so the same spec
always yields the same digests. Shared by tests and benchmarks.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
MTIME = 1_700_000_000

PASSWD = """root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
user:x:1000:1000:user:/home/user:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
"""
GROUP = """root:x:0:
daemon:x:1:
www-data:x:33:
users:x:100:user
user:x:1000:
extra:x:2000:user
nogroup:x:65534:
"""


def find_busybox() -> str:
    for p in BUSYBOX_CANDIDATES:
        path = Path(p)
        if path.exists():
            out = subprocess.run(["file", "-L", p], capture_output=True, text=True, check=False).stdout \
                if shutil.which("file") else "statically linked"
            if "dynamically" not in out:
                return p
    raise FileNotFoundError("busybox-static is not installed (apt-get install busybox-static)")


def busybox_applets(busybox: str) -> list[str]:
    out = subprocess.run([busybox, "--list-full"], capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


@dataclasses.dataclass(frozen=True)
class Entry:
    """One path in a layer: a file (data), a directory, a symlink, or a whiteout (`.wh.` name)."""

    path: str
    data: bytes | None = None
    mode: int = 0o644
    kind: str = "file"  # file | dir | symlink | hardlink
    target: str = ""
    uid: int = 0
    gid: int = 0


@dataclasses.dataclass(frozen=True)
class ImageSpec:
    name: str  # repository, e.g. "localhost/busybox"
    tag: str = "latest"
    entrypoint: tuple[str, ...] | None = None
    cmd: tuple[str, ...] | None = ("sh",)
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    workdir: str = ""
    user: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    extra_layers: tuple[tuple[Entry, ...], ...] = ()  # on top of the busybox base layer
    exposed_ports: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.tag}"


@dataclasses.dataclass(frozen=True)
class BuiltImage:
    spec: ImageSpec
    oci_dir: Path  # OCI image layout directory
    docker_archive: Path  # docker-archive tarball (docker save format)
    manifest_digest: str
    config_digest: str
    layer_digests: tuple[str, ...]  # compressed blobs
    diff_ids: tuple[str, ...]  # uncompressed layer digests
    size: int

    @property
    def ref(self) -> str:
        return self.spec.ref

    @property
    def image_id(self) -> str:
        return self.config_digest


def _tar(entries: list[Entry]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.path.lstrip("/"))
            info.mtime, info.uid, info.gid, info.mode = MTIME, e.uid, e.gid, e.mode
            if e.kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif e.kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, e.target
                tar.addfile(info)
            elif e.kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, e.target.lstrip("/")
                tar.addfile(info)
            else:
                data = e.data or b""
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def base_entries(busybox: str | None = None) -> list[Entry]:
    busybox = busybox or find_busybox()
    entries = [Entry(d, kind="dir", mode=0o755) for d in (
        "bin", "sbin", "usr", "usr/bin", "usr/sbin", "etc", "root", "home", "home/user", "var", "var/www",
        "proc", "sys", "dev", "run")]
    entries.append(Entry("tmp", kind="dir", mode=0o1777))
    entries.append(Entry("bin/busybox", data=Path(busybox).read_bytes(), mode=0o755))
    for applet in busybox_applets(busybox):
        rel = applet.lstrip("/")
        if rel == "bin/busybox":
            continue
        depth = rel.count("/")
        entries.append(Entry(rel, kind="symlink", target="../" * depth + "bin/busybox"))
    entries += [
        Entry("etc/passwd", data=PASSWD.encode()),
        Entry("etc/group", data=GROUP.encode()),
        Entry("etc/hostname", data=b"busybox\n"),
        Entry("var/www/index.html", data=b"hello from busybox\n"),
    ]
    return entries


def _blob(dest: Path, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = dest / "blobs" / "sha256" / digest.split(":")[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_bytes(data)
    return digest


def build(spec: ImageSpec, dest: Path, busybox: str | None = None) -> BuiltImage:
    """Write `spec` as an OCI layout under dest/<name>-<tag>/oci and a docker archive beside it."""
    slug = f"{spec.name.replace('/', '_').replace(':', '_')}-{spec.tag}"
    root = dest / slug
    oci = root / "oci"
    if root.exists():
        shutil.rmtree(root)
    oci.mkdir(parents=True)
    layers_raw = [_tar(base_entries(busybox))] + [_tar(list(layer)) for layer in spec.extra_layers]
    layers_gz = [gzip.compress(raw, compresslevel=6, mtime=0) for raw in layers_raw]
    diff_ids = tuple("sha256:" + hashlib.sha256(raw).hexdigest() for raw in layers_raw)
    layer_digests = tuple(_blob(oci, gz) for gz in layers_gz)

    config: dict = {"Env": list(spec.env)}
    if spec.entrypoint is not None:
        config["Entrypoint"] = list(spec.entrypoint)
    if spec.cmd is not None:
        config["Cmd"] = list(spec.cmd)
    if spec.workdir:
        config["WorkingDir"] = spec.workdir
    if spec.user:
        config["User"] = spec.user
    if spec.labels:
        config["Labels"] = dict(spec.labels)
    if spec.exposed_ports:
        config["ExposedPorts"] = {p: {} for p in spec.exposed_ports}
    image_config = {
        "architecture": "amd64" if _arch() == "x86_64" else "arm64",
        "os": "linux",
        "created": "2023-11-14T22:13:20Z",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
        "history": [{"created": "2023-11-14T22:13:20Z", "created_by": "nodeagent.testing.images"}
                    for _ in layers_raw],
    }
    config_bytes = json.dumps(image_config, sort_keys=True, separators=(",", ":")).encode()
    config_digest = _blob(oci, config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": len(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": d, "size": len(gz)}
                   for d, gz in zip(layer_digests, layers_gz, strict=True)],
    }
    manifest_bytes = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    manifest_digest = _blob(oci, manifest_bytes)
    (oci / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (oci / "index.json").write_text(json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": len(manifest_bytes),
            "annotations": {"org.opencontainers.image.ref.name": spec.tag,
                            "io.containerd.image.name": _docker_ref(spec)},
        }],
    }))

    archive = root / f"{slug}.docker.tar"
    with tarfile.open(archive, "w") as tar:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), MTIME
            tar.addfile(info, io.BytesIO(data))

        cfg_name = config_digest.split(":")[1] + ".json"
        add(cfg_name, config_bytes)
        layer_names = []
        for diff_id, raw in zip(diff_ids, layers_raw, strict=True):
            name = f"{diff_id.split(':')[1]}/layer.tar"
            add(name, raw)
            layer_names.append(name)
        add("manifest.json", json.dumps([{"Config": cfg_name, "RepoTags": [_docker_ref(spec)],
                                          "Layers": layer_names}]).encode())
    size = sum(len(g) for g in layers_gz) + len(config_bytes)
    return BuiltImage(spec, oci, archive, manifest_digest, config_digest, layer_digests, diff_ids, size)


def _docker_ref(spec: ImageSpec) -> str:
    name = spec.name
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    return f"{name}:{spec.tag}"


def _arch() -> str:
    import platform

    return platform.machine()


# The standard test images.
BUSYBOX = ImageSpec("localhost/busybox", "latest")
CONFIGURED = ImageSpec(
    "localhost/configured", "v1",
    entrypoint=("/bin/sh", "-c"),
    cmd=("echo configured $GREETING from $(pwd) as $(id -u):$(id -g)",),
    env=("PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GREETING=hello"),
    workdir="/work",
    user="1000:1000",
    labels=(("org.example.purpose", "runtime-tests"),),
    extra_layers=((Entry("work", kind="dir", mode=0o777), Entry("work/data.txt", data=b"layer two\n")),),
)
WHITEOUT = ImageSpec(
    "localhost/whiteout", "v1",
    extra_layers=(
        (Entry("etc/removed.txt", data=b"gone\n"), Entry("opaque", kind="dir", mode=0o755),
         Entry("opaque/old.txt", data=b"old\n")),
        (Entry("etc/.wh.removed.txt", data=b""), Entry("opaque/.wh..wh..opq", data=b""),
         Entry("opaque/new.txt", data=b"new\n")),
    ),
)
HTTPD = ImageSpec("localhost/httpd", "v1", cmd=("httpd", "-f", "-p", "80", "-h", "/var/www"),
                  exposed_ports=("80/tcp",))


def host_programs_layer(*programs: str) -> tuple[Entry, ...]:
    """Host programs with every shared library the dynamic loader resolves for them (ldd), at the same
    paths: a real dynamically linked tool (e.g. bind's nslookup) inside a test image, no registry needed."""
    import subprocess

    files: dict[str, str] = {}
    for prog in programs:
        files[prog] = prog
        out = subprocess.run(["ldd", prog], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            words = line.split()
            path = words[2] if "=>" in words and len(words) > 2 else words[0] if words else ""
            if path.startswith("/"):
                files[path] = path
    dirs = sorted({str(Path(f).parent).lstrip("/") for f in files} - {""})
    parents = sorted({"/".join(d.split("/")[:i]) for d in dirs for i in range(1, d.count("/") + 2)})
    return (*(Entry(d, kind="dir", mode=0o755) for d in parents),
            *(Entry(f.lstrip("/"), data=Path(f).read_bytes(), mode=0o755) for f in sorted(files)))


def dnsutils_spec() -> ImageSpec:
    """busybox plus Debian's bind9 `nslookup` (it searches dotted names by the resolv.conf search list, as the
    kubernetes DNS-debugging recipe expects; busybox's own does not). Needs bind9-dnsutils on the host."""
    return ImageSpec("localhost/dnsutils", "v1", extra_layers=(host_programs_layer("/usr/bin/nslookup"),))


class ImageFactory:
    """Builds each spec once per factory and hands back the result."""

    def __init__(self, dest: Path) -> None:
        self.dest = Path(dest)
        self._built: dict[str, BuiltImage] = {}

    def get(self, spec: ImageSpec = BUSYBOX) -> BuiltImage:
        key = f"{spec.ref}@{hash(spec)}"
        if key not in self._built:
            self._built[key] = build(spec, self.dest)
        return self._built[key]

    @property
    def busybox(self) -> BuiltImage:
        return self.get(BUSYBOX)

    @property
    def configured(self) -> BuiltImage:
        return self.get(CONFIGURED)

    @property
    def whiteout(self) -> BuiltImage:
        return self.get(WHITEOUT)

    @property
    def httpd(self) -> BuiltImage:
        return self.get(HTTPD)
