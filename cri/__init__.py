"""The container runtime and its CRI gRPC server."""

import os

# The runtime forks container processes from the daemon; gRPC's fork handlers would try to restart
# its threads in those children (which cannot make threads once in a new pid namespace). The
# children never touch gRPC, so the handlers are turned off before gRPC is first imported.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
