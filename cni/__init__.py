"""The CNI plugins (bridge, host-local, portmap) and the CNI invoker the runtime uses."""
