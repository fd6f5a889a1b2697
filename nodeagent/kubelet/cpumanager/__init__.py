"""The CPU manager: exclusive CPUs for Guaranteed pods (the static policy), its checkpoint and cpusets."""
