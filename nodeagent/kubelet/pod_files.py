"""The files the kubelet makes in a pod's directory and bind-mounts into its containers: the managed
/etc/hosts (with hostAliases) and each container's termination-message file, and how a container's
termination message is read back (kubelet_pods.go makeHostsMount; kuberuntime getTerminationMessage).

Blocking file work: callers run these on a worker thread.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ETC_HOSTS = "/etc/hosts"
HOSTS_MOUNT_NAME = "k8s-managed-etc-hosts"
MANAGED_HEADER = "# Kubernetes-managed hosts file.\n"
MANAGED_HEADER_HOST_NETWORK = "# Kubernetes-managed hosts file (host network).\n"
MAX_MESSAGE_BYTES = 4096  # kubecontainer.MaxContainerTerminationMessageLength
MAX_LOG_MESSAGE_BYTES = 2048  # MaxContainerTerminationMessageLogLength
MAX_LOG_MESSAGE_LINES = 80  # MaxContainerTerminationMessageLogLines
# The container annotations the kubelet keeps its termination-message settings in.
MESSAGE_PATH_ANNOTATION = "io.kubernetes.container.terminationMessagePath"
MESSAGE_POLICY_ANNOTATION = "io.kubernetes.container.terminationMessagePolicy"


def hostname_and_domain(pod: Mapping[str, Any], cluster_domain: str) -> tuple[str, str]:
    """GeneratePodHostNameAndDomain: spec.hostname or the pod's name (at most 63 characters), and
    <subdomain>.<namespace>.svc.<cluster domain> when spec.subdomain is set."""
    m = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    host = spec.get("hostname") or m.get("name", "")
    if len(host) > 63:
        host = host[:63].rstrip("-.")
    sub = spec.get("subdomain")
    domain = f"{sub}.{m.get('namespace', 'default')}.svc.{cluster_domain}" if sub else ""
    return host, domain


def kernel_hostname(pod: Mapping[str, Any], cluster_domain: str) -> str:
    """GetNodenameForKernel: the short hostname, or with setHostnameAsFQDN (and a subdomain) the FQDN."""
    host, domain = hostname_and_domain(pod, cluster_domain)
    if (pod.get("spec") or {}).get("setHostnameAsFQDN") and domain:
        return f"{host}.{domain}"
    return host


_PROPAGATION = {None: 0, "None": 0, "HostToContainer": 1, "Bidirectional": 2}  # CRI MountPropagation


def mount_options(vm: Mapping[str, Any], m: Any, rro_supported: bool) -> None:
    """A volumeMount's mountPropagation and recursiveReadOnly on its CRI Mount (kubelet makeMounts):
    IfPossible is recursive only where the runtime can; Enabled is asked of the runtime as is."""
    m.propagation = _PROPAGATION.get(vm.get("mountPropagation"), 0)
    rro = vm.get("recursiveReadOnly")
    m.recursive_read_only = m.readonly and (rro == "Enabled" or rro == "IfPossible" and rro_supported)


def _aliases(host_aliases: Iterable[Mapping[str, Any]]) -> str:
    lines = [f"{a.get('ip', '')}\t" + "\t".join(a.get("hostnames") or []) + "\n" for a in host_aliases]
    return "\n# Entries added by HostAliases.\n" + "".join(lines) if lines else ""


def managed_hosts(pod_ips: Iterable[str], hostname: str, domain: str,
                  host_aliases: Iterable[Mapping[str, Any]]) -> str:
    """The hosts file of a pod with its own network namespace, as the kubelet writes it."""
    out = [MANAGED_HEADER, "127.0.0.1\tlocalhost\n", "::1\tlocalhost ip6-localhost ip6-loopback\n",
           "fe00::0\tip6-localnet\n", "fe00::0\tip6-mcastprefix\n", "fe00::1\tip6-allnodes\n",
           "fe00::2\tip6-allrouters\n"]
    for ip in pod_ips:
        out.append(f"{ip}\t{hostname}.{domain}\t{hostname}\n" if domain else f"{ip}\t{hostname}\n")
    return "".join(out) + _aliases(host_aliases)


def host_network_hosts(node_hosts: str, host_aliases: Iterable[Mapping[str, Any]]) -> str:
    """A hostNetwork pod's hosts file: the node's own, under the kubelet's header, then the aliases."""
    return MANAGED_HEADER_HOST_NETWORK + node_hosts + _aliases(host_aliases)


def wants_hosts_mount(c: Mapping[str, Any]) -> bool:
    """The kubelet mounts its hosts file unless the container mounts something at /etc/hosts itself."""
    return not any(vm.get("mountPath") == ETC_HOSTS for vm in c.get("volumeMounts") or [])


def ensure_hosts_file(pod_dir: Path, pod: Mapping[str, Any], pod_ips: list[str], cluster_domain: str,
                      node_hosts_path: str = ETC_HOSTS) -> Path:
    """Write <pod dir>/etc-hosts (mode 0644) and return its path."""
    spec = pod.get("spec") or {}
    aliases = spec.get("hostAliases") or []
    if spec.get("hostNetwork"):
        content = host_network_hosts(Path(node_hosts_path).read_text(), aliases)
    else:
        host, domain = hostname_and_domain(pod, cluster_domain)
        content = managed_hosts(pod_ips, host, domain, aliases)
    pod_dir.mkdir(parents=True, exist_ok=True)
    path = pod_dir / "etc-hosts"
    # In place (no rename), as the kubelet's os.WriteFile: running containers have this inode bind-mounted.
    with open(path, "w") as f:
        f.write(content)
    os.chmod(path, 0o644)
    return path


def termination_message_file(pod_dir: Path, container: str) -> Path:
    """A new, empty file under <pod dir>/containers/<name>/ for the container to write its termination
    message to (one per container instance, as the kubelet makes them)."""
    d = pod_dir / "containers" / container
    d.mkdir(parents=True, exist_ok=True, mode=0o750)
    while True:
        path = d / f"{int.from_bytes(os.urandom(4), 'big'):08x}"
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            continue
        os.fchmod(fd, 0o666)  # whatever user the container runs as may write it
        os.close(fd)
        return path


def _read_at_most(path: str, limit: int) -> bytes:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            f.seek(size - limit)
        return f.read(limit)


def termination_message(mounts: Iterable[tuple[str, str]], message_path: str, fallback: bool,
                        log_path: str) -> str:
    """getTerminationMessage: the tail (4 KiB) of the file mounted at the container's
    terminationMessagePath; with fallback (FallbackToLogsOnError and a failed exit) and no message, the last
    80 lines (2 KiB) of its log. mounts: (container path, host path)."""
    if message_path:
        for container_path, host_path in mounts:
            if container_path != message_path:
                continue
            try:
                data = _read_at_most(host_path, MAX_MESSAGE_BYTES)
            except FileNotFoundError:
                break
            except OSError as e:
                return f"Error on reading termination log {host_path}: {e}"
            if data or not fallback:
                return data.decode(errors="replace")
            break
    if not fallback or not log_path:
        return ""
    return last_log_lines(log_path)


def last_log_lines(log_path: str) -> str:
    """The container's last log lines (CRI log records' content), at most 80 lines and 2 KiB."""
    try:
        raw = _read_at_most(log_path, 64 * 1024)
    except OSError:
        return ""
    content = []
    for line in raw.split(b"\n"):
        parts = line.split(b" ", 3)
        if len(parts) == 4 and parts[1] in (b"stdout", b"stderr"):
            content.append(parts[3] + (b"\n" if parts[2] == b"F" else b""))
    text = b"".join(content)
    lines = text.splitlines(keepends=True)[-MAX_LOG_MESSAGE_LINES:]
    return b"".join(lines)[-MAX_LOG_MESSAGE_BYTES:].decode(errors="replace")
