"""`nodeagent lab`: a cluster of network-namespace nodes on one machine (no VMs), for tests and trials."""
