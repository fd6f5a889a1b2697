"""Cluster DNS: Service/Pod records answered from informers, everything else forwarded upstream.

`index` (objects → indexes), `records` (name → records, pure), `server` (UDP/TCP listeners,
truncation), `forward` (upstream resolvers with a TTL cache), `service` (the component: informers +
listeners, `serve(config, ready)`), `config` (its `DNSConfig`), `register` (the kube-dns Service
pointing here). A pod's resolv.conf is the kubelet's (`nodeagent.kubelet.resolvconf`).
"""
