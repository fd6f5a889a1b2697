"""The one async client for the Kubernetes REST API, with list-then-watch informers and leader election.

Every component (scheduler, controllers, kubelet, netproxy) talks to the apiserver through this package.
"""

from nodeagent.client.informer import Informer
from nodeagent.client.rest import Client, ClientError

__all__ = ["Client", "ClientError", "Informer"]
