"""Cluster DNS: Service/Pod records answered from informers, everything else forwarded upstream.

`records` (pure name → records) over `index` (objects → indexes), `server` (UDP/TCP listeners, truncation), `forward` (upstream
resolvers with a TTL cache), `service` (the component: informers + listeners, `serve(config, ready)`),
`resolvconf` (the kubelet's per-pod resolv.conf by dnsPolicy).
"""
