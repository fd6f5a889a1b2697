"""nodeagent: a kubelet-like node agent with an embedded control plane."""

__version__ = "0.1.0"
