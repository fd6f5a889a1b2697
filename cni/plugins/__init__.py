"""The plugins: bridge (main), host-local (IPAM), portmap (chained)."""
