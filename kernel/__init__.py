"""The kernel layer: small synchronous helpers over Linux mechanisms, with typed errors and no policy.

Everything below it (cni, cri, netproxy, netpol, nodeagent) reaches the kernel through here; this
package imports nothing of ours, only the standard library, pyroute2 and (for cgroup v1) cgroupspy.

- `syscalls`  every raw syscall through ctypes (mount, umount, unshare, setns, pivot_root,
              mount_setattr, prctl, capset, ...), one `Syscalls` interface; `testing` has its
              recording fake (youki's `Syscall` trait and `TestHelperSyscall`)
- `netns`     entering a network namespace on a dedicated thread that always switches back:
              `run_in` (one call) and `NetnsWorker` (one long-lived thread)
- `cgroups`   the v1 (cgroupspy) and v2 drivers behind one interface, and their detection
- `caps`      capability names, numbers, the bounding set; `seccomp` libseccomp filters and the
              OCI profile format
- `rtnl`      stdlib rtnetlink requests for hot paths; `netlink` the pyroute2 helpers for the rest
- `nftables`  the nf_tables netlink encoder and batch socket
- `xtables`   the legacy x_tables socket API (GET_INFO/GET_ENTRIES/SET_REPLACE) and the xtables lock
- `iptables`  the one rule for which iptables backend (legacy or nft) this node uses
- `fs`        `atomic_write` and friends: temp file, fsync, rename, fsync of the directory
- `mounts`    the mount table (/proc/self/mountinfo), parsed in one place
- `probe`     what this host's kernel and tools support; `memory` process-wide memory settings
- `errors`    the base of the typed errors (all are OSError, so callers catching OSError still do)
- `in_process` servers of this process by the Unix socket they serve (the apiserver's and the CRI
              runtime's in-process entries): no kernel call, here as the one package both may import

Modules stay cheap to import: the CNI plugins' exec'd path loads `netns`, `rtnl`, `iptables` and
`syscalls`, so those import no `typing` and no third-party package at run time.
"""
