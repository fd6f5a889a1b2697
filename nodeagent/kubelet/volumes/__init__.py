"""Pod volumes: emptyDir (disk, tmpfs), hostPath, configMap, secret, downwardAPI, projected."""

from nodeagent.kubelet.volumes.atomic_writer import AtomicWriter, FileProjection, PayloadError
from nodeagent.kubelet.volumes.manager import (
    DEFAULT_ROOT,
    Volume,
    VolumeError,
    VolumeManager,
    check_host_path,
    empty_dir_memory_size,
)
from nodeagent.kubelet.volumes.payloads import VolumeSourceError

__all__ = ["DEFAULT_ROOT", "AtomicWriter", "FileProjection", "PayloadError", "Volume", "VolumeError",
           "VolumeManager", "VolumeSourceError", "check_host_path", "empty_dir_memory_size"]
