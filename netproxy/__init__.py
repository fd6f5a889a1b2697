"""netproxy: Services on every node through iptables, nftables or IPVS rules (kube-proxy's model).

Watch handlers feed change trackers (`tracker`), which only record; a bounded
runner (`runner`) calls one sync per backend (`proxier.Proxier`); each backend
writes one transaction. `service.serve` is the thin adapter `nodeagent up` runs.
"""
