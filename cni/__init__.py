"""The CNI plugins (bridge, host-local, portmap) and the CNI invoker the runtime uses.

Plugins: `skel` (the only code reading CNI_* env, stdin, stdout; version negotiation and
verb dispatch), `errors` (the spec's codes), `plugins/{bridge,host_local,portmap}` and
`plugins/delegate` (calling the IPAM plugin), `ipam/{config,allocator,store}` (host-local's
pieces), `rtnl` (stdlib rtnetlink for the hot path), `netlink` (pyroute2 for the rest), `netns`
(setns on a dedicated thread), `iptables` + `masq` (rules), `client` + `native/` (the exec'd
thin clients), `daemon` (`nodeagent cni-daemon`), `install` (launchers and
the default conflist). This package must stay cheap to import: the exec'd path loads it.
"""
