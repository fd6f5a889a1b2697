"""The plugins: bridge (main), host-local (IPAM), portmap (chained); `delegate` is how a plugin calls its
IPAM plugin (our host-local in process)."""
