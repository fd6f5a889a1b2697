"""The Ingress controller and Gateway API on HAProxy (`nodeagent ingress`, a component of `up`, `server`
and `agent`)."""
