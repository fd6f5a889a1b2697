"""The CNI plugins (bridge, host-local, portmap) and the CNI invoker the runtime uses.

Plugins: `skel` (the only code reading CNI_* env, stdin, stdout; version negotiation and
verb dispatch), `errors` (the spec's codes), `plugins/{bridge,host_local,portmap}` and
`plugins/delegate` (calling the IPAM plugin), `ipam/{config,allocator,store}` (host-local's
pieces), `iptables` + `masq` (rules), `client` + `native/` (the exec'd thin clients),
`daemon` (`nodeagent cni-daemon`), `install` (launchers and the default conflist).
Kernel work goes through the kernel layer only (`kernel.rtnl` on the hot path,
`kernel.netlink` for the rest, `kernel.netns`, `kernel.iptables` for the backend).
This package must stay cheap to import: the exec'd path loads it.
"""
