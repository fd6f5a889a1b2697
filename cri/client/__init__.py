"""The CRI client: `RuntimeClient` (async, cri/client/aio.py) speaks every runtime.v1 verb and is the only
place their requests are built; `CRIClient` (cri/client/sync.py) calls the same verbs synchronously for
tests, benchmarks and tools. Both work against any CRI runtime (ours, containerd)."""

from cri.client.aio import RuntimeClient, endpoint_target, is_not_found, is_unimplemented
from cri.client.configs import container_config, sandbox_config
from cri.client.sync import CRIClient

__all__ = ["CRIClient", "RuntimeClient", "container_config", "endpoint_target", "is_not_found",
           "is_unimplemented", "sandbox_config"]
