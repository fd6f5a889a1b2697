"""Authorization: kube-apiserver's `Node,RBAC` chain, its bootstrap policy, escalation checks,
impersonation and the access/token review APIs. The handlers call `Authorizer.authorize` once per request.
"""
