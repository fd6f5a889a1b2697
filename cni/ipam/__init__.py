"""host-local IPAM: configuration, a pure round-robin allocator, and allocation stores."""
