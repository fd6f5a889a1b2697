"""The layer-2 announcer of LoadBalancer addresses (MetalLB's speaker in L2 mode), one per node."""
