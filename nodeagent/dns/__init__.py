"""Cluster DNS: Service/Pod records answered from informers, everything else forwarded upstream.

`index` (objects → indexes), `records` (name → records, pure), `server` (UDP/TCP listeners,
truncation), `forward` (upstream resolvers with a TTL cache), `service` (the component: informers +
listeners, `serve(config, ready)`), `register` (the kube-dns Service pointing here), `resolvconf`
(the kubelet's per-pod resolv.conf by dnsPolicy).
"""
