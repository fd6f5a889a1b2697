"""The bootstrap policy kube-apiserver reconciles at start (plugin/pkg/auth/authorizer/rbac/bootstrappolicy):
default ClusterRoles and ClusterRoleBindings, the per-controller `system:controller:*` roles bound to
each controller's ServiceAccount in kube-system (as with --use-service-account-credentials), and
kubeadm's bindings for bootstrap tokens and the public cluster-info. Written as data, in kube's order."""

from __future__ import annotations

from typing import Any

from nodeagent.apiserver.authz.rules import Rule

AUTOUPDATE = "rbac.authorization.kubernetes.io/autoupdate"
BOOTSTRAP_LABEL = {"kubernetes.io/bootstrapping": "rbac-defaults"}
RW = "get list watch create update patch delete deletecollection"
READ = "get list watch"
WRITE = "create delete deletecollection patch update"
EVENTS = ("create patch update", ["", "events.k8s.io"], ["events"])


def r(
    verbs: str, groups: list[str] | str, resources: list[str] | str, names: list[str] | None = None
) -> Rule:
    g = [groups] if isinstance(groups, str) else groups
    res = resources.split() if isinstance(resources, str) else resources
    rule: Rule = {"verbs": sorted(verbs.split()), "apiGroups": g, "resources": sorted(res)}
    if names:
        rule["resourceNames"] = names
    return rule


def urls(verbs: str, *paths: str) -> Rule:
    return {"verbs": verbs.split(), "nonResourceURLs": list(paths)}


def events_rule() -> Rule:
    return r(*EVENTS)


AGG_ADMIN, AGG_EDIT, AGG_VIEW = (
    "rbac.authorization.k8s.io/aggregate-to-" + x for x in ("admin", "edit", "view")
)


def _role(
    name: str, rules: list[Rule] | None, labels: dict[str, str] | None = None, aggregate: str | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "labels": {**BOOTSTRAP_LABEL, **(labels or {})},
        "annotations": {AUTOUPDATE: "true"},
    }
    role: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": meta,
        "rules": rules or [],
    }
    if aggregate:
        role["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": {aggregate: "true"}}]}
    return role


def _scheduler_rules() -> list[Rule]:
    return [
        events_rule(),
        r("create", "coordination.k8s.io", "leases"),
        r("get update", "coordination.k8s.io", "leases", ["kube-scheduler"]),
        r(READ, "", "nodes"),
        r("delete get list watch", "", "pods"),
        r("create", "", "bindings pods/binding"),
        r("patch update", "", "pods/status"),
        r(READ, "", "replicationcontrollers services"),
        r(READ, ["apps", "extensions"], "replicasets"),
        r(READ, "apps", "statefulsets"),
        r(READ, "policy", "poddisruptionbudgets"),
        r(READ, "", "persistentvolumeclaims persistentvolumes"),
        r("create", "authentication.k8s.io", "tokenreviews"),
        r("create", "authorization.k8s.io", "subjectaccessreviews"),
        r(READ, "storage.k8s.io", "csinodes"),
        r(READ, "", "namespaces"),
        r(READ, "storage.k8s.io", "csidrivers"),
        r(READ, "storage.k8s.io", "csistoragecapacities"),
    ]


def _node_rules() -> list[Rule]:
    return [
        r("create", "authentication.k8s.io", "tokenreviews"),
        r("create", "authorization.k8s.io", "localsubjectaccessreviews subjectaccessreviews"),
        r(READ, "", "services"),
        r("create get list watch", "", "nodes"),
        r("patch update", "", "nodes/status"),
        r("patch update", "", "nodes"),
        r("create patch update", "", "events"),
        r(READ, "", "pods"),
        r("create delete", "", "pods"),
        r("patch update", "", "pods/status"),
        r("create", "", "pods/eviction"),
        r(READ, "", "configmaps secrets"),
        r("get", "", "persistentvolumeclaims persistentvolumes"),
        r("get", "", "endpoints"),
        r("create get list watch", "certificates.k8s.io", "certificatesigningrequests"),
        r("create delete get patch update", "coordination.k8s.io", "leases"),
        r("get", "storage.k8s.io", "volumeattachments"),
        r("create", "", "serviceaccounts/token"),
        r("get patch update", "", "persistentvolumeclaims/status"),
        r(READ, "storage.k8s.io", "csidrivers"),
        r("create delete get patch update", "storage.k8s.io", "csinodes"),
        r(READ, "node.k8s.io", "runtimeclasses"),
    ]


def _approver(signer: str) -> Rule:
    return r("approve", "certificates.k8s.io", "signers", [signer])


def cluster_roles() -> list[dict[str, Any]]:
    view = [
        r(
            READ,
            "",
            "configmaps endpoints persistentvolumeclaims persistentvolumeclaims/status pods "
            "replicationcontrollers replicationcontrollers/scale serviceaccounts services "
            "services/status",
        ),
        r(
            READ,
            "",
            "bindings events limitranges namespaces/status pods/log pods/status "
            "replicationcontrollers/status resourcequotas resourcequotas/status",
        ),
        r(READ, "", "namespaces"),
        r(READ, "discovery.k8s.io", "endpointslices"),
        r(
            READ,
            "apps",
            "controllerrevisions daemonsets daemonsets/status deployments deployments/scale "
            "deployments/status replicasets replicasets/scale replicasets/status statefulsets "
            "statefulsets/scale statefulsets/status",
        ),
        r(READ, "autoscaling", "horizontalpodautoscalers horizontalpodautoscalers/status"),
        r(READ, "batch", "cronjobs cronjobs/status jobs jobs/status"),
        r(
            READ,
            "extensions",
            "daemonsets daemonsets/status deployments deployments/scale deployments/status "
            "ingresses ingresses/status networkpolicies replicasets replicasets/scale "
            "replicasets/status replicationcontrollers/scale",
        ),
        r(READ, "policy", "poddisruptionbudgets poddisruptionbudgets/status"),
        r(READ, "networking.k8s.io", "ingresses ingresses/status networkpolicies"),
    ]
    edit = [
        r(READ, "", "pods/attach pods/exec pods/portforward pods/proxy secrets services/proxy"),
        r("impersonate", "", "serviceaccounts"),
        r(WRITE, "", "pods pods/attach pods/exec pods/portforward pods/proxy"),
        r("create", "", "pods/eviction"),
        r(
            WRITE,
            "",
            "configmaps events persistentvolumeclaims replicationcontrollers "
            "replicationcontrollers/scale secrets serviceaccounts services services/proxy",
        ),
        r("create", "", "serviceaccounts/token"),
        r(
            WRITE,
            "apps",
            "daemonsets deployments deployments/rollback deployments/scale replicasets "
            "replicasets/scale statefulsets statefulsets/scale",
        ),
        r(WRITE, "autoscaling", "horizontalpodautoscalers"),
        r(WRITE, "batch", "cronjobs jobs"),
        r(
            WRITE,
            "extensions",
            "daemonsets deployments deployments/rollback deployments/scale ingresses "
            "networkpolicies replicasets replicasets/scale replicationcontrollers/scale",
        ),
        r(WRITE, "policy", "poddisruptionbudgets"),
        r(WRITE, "networking.k8s.io", "ingresses networkpolicies"),
        r(RW, "coordination.k8s.io", "leases"),
    ]
    admin = [
        r("create", "authorization.k8s.io", "localsubjectaccessreviews"),
        r(RW, "rbac.authorization.k8s.io", "rolebindings roles"),
    ]
    return [
        _role("admin", None, aggregate=AGG_ADMIN),
        _role("cluster-admin", [r("*", "*", "*"), urls("*", "*")]),
        _role("edit", None, {AGG_ADMIN: "true"}, aggregate=AGG_EDIT),
        _role("system:aggregate-to-admin", admin, {AGG_ADMIN: "true"}),
        _role("system:aggregate-to-edit", edit, {AGG_EDIT: "true"}),
        _role("system:aggregate-to-view", view, {AGG_VIEW: "true"}),
        _role(
            "system:auth-delegator",
            [
                r("create", "authentication.k8s.io", "tokenreviews"),
                r("create", "authorization.k8s.io", "subjectaccessreviews"),
            ],
        ),
        _role(
            "system:basic-user",
            [
                r("create", "authorization.k8s.io", "selfsubjectaccessreviews selfsubjectrulesreviews"),
                r("create", "authentication.k8s.io", "selfsubjectreviews"),
            ],
        ),
        _role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            [r("create", "certificates.k8s.io", "certificatesigningrequests/nodeclient")],
        ),
        _role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            [r("create", "certificates.k8s.io", "certificatesigningrequests/selfnodeclient")],
        ),
        _role(
            "system:certificates.k8s.io:kube-apiserver-client-approver",
            [_approver("kubernetes.io/kube-apiserver-client")],
        ),
        _role(
            "system:certificates.k8s.io:kube-apiserver-client-kubelet-approver",
            [_approver("kubernetes.io/kube-apiserver-client-kubelet")],
        ),
        _role(
            "system:certificates.k8s.io:kubelet-serving-approver",
            [_approver("kubernetes.io/kubelet-serving")],
        ),
        _role(
            "system:certificates.k8s.io:legacy-unknown-approver", [_approver("kubernetes.io/legacy-unknown")]
        ),
        _role(
            "system:discovery",
            [
                urls(
                    "get",
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                )
            ],
        ),
        _role(
            "system:heapster",
            [r(READ, "", "events namespaces nodes pods"), r(READ, "extensions", "deployments")],
        ),
        _role("system:kube-aggregator", [r(READ, "", "endpoints services")]),
        _role(
            "system:kube-controller-manager",
            [
                events_rule(),
                r("create", "coordination.k8s.io", "leases"),
                r("get update", "coordination.k8s.io", "leases", ["kube-controller-manager"]),
                r("create", "", "secrets serviceaccounts"),
                r("delete", "", "secrets"),
                r("get", "", "configmaps namespaces secrets serviceaccounts"),
                r("update", "", "secrets serviceaccounts"),
                r("create", "authentication.k8s.io", "tokenreviews"),
                r("create", "authorization.k8s.io", "subjectaccessreviews"),
                r("list watch", "*", "*"),
                r("create", "", "serviceaccounts/token"),
            ],
        ),
        _role("system:kube-dns", [r("list watch", "", "endpoints services")]),
        _role("system:kube-scheduler", _scheduler_rules()),
        _role(
            "system:kubelet-api-admin",
            [
                r(READ, "", "nodes"),
                r("proxy", "", "nodes"),
                r("*", "", "nodes/log nodes/metrics nodes/proxy nodes/stats"),
            ],
        ),
        _role(
            "system:monitoring",
            [
                urls(
                    "get",
                    "/healthz",
                    "/healthz/*",
                    "/livez",
                    "/livez/*",
                    "/metrics",
                    "/metrics/slis",
                    "/readyz",
                    "/readyz/*",
                )
            ],
        ),
        _role("system:node", _node_rules()),
        _role(
            "system:node-bootstrapper",
            [r("create get list watch", "certificates.k8s.io", "certificatesigningrequests")],
        ),
        _role(
            "system:node-problem-detector",
            [r("get", "", "nodes"), r("patch", "", "nodes/status"), events_rule()],
        ),
        _role(
            "system:node-proxier",
            [
                r("list watch", "", "endpoints services"),
                r(READ, "", "nodes"),
                events_rule(),
                r("list watch", "discovery.k8s.io", "endpointslices"),
            ],
        ),
        _role(
            "system:persistent-volume-provisioner",
            [
                r("create delete get list watch", "", "persistentvolumes"),
                r("get list update watch", "", "persistentvolumeclaims"),
                r(READ, "storage.k8s.io", "storageclasses"),
                r("watch", "", "events"),
                events_rule(),
            ],
        ),
        _role(
            "system:public-info-viewer",
            [urls("get", "/healthz", "/livez", "/readyz", "/version", "/version/")],
        ),
        _role(
            "system:service-account-issuer-discovery",
            [urls("get", "/.well-known/openid-configuration", "/openid/v1/jwks")],
        ),
        _role(
            "system:volume-scheduler",
            [
                r("get list patch update watch", "", "persistentvolumes"),
                r(READ, "storage.k8s.io", "storageclasses"),
                r("get list patch update watch", "", "persistentvolumeclaims"),
            ],
        ),
        _role("view", None, {AGG_EDIT: "true"}, aggregate=AGG_VIEW),
    ]


def _binding(name: str, role: str, subjects: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name, "labels": dict(BOOTSTRAP_LABEL), "annotations": {AUTOUPDATE: "true"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": subjects,
    }


def user(name: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}


def group(name: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}


def service_account(ns: str, name: str) -> dict[str, str]:
    return {"kind": "ServiceAccount", "name": name, "namespace": ns}


def cluster_role_bindings() -> list[dict[str, Any]]:
    return [
        _binding("cluster-admin", "cluster-admin", [group("system:masters")]),
        _binding("system:basic-user", "system:basic-user", [group("system:authenticated")]),
        _binding("system:discovery", "system:discovery", [group("system:authenticated")]),
        _binding(
            "system:kube-controller-manager",
            "system:kube-controller-manager",
            [user("system:kube-controller-manager")],
        ),
        _binding("system:kube-dns", "system:kube-dns", [service_account("kube-system", "kube-dns")]),
        _binding("system:kube-scheduler", "system:kube-scheduler", [user("system:kube-scheduler")]),
        _binding("system:monitoring", "system:monitoring", [group("system:monitoring")]),
        _binding("system:node", "system:node", []),
        _binding("system:node-proxier", "system:node-proxier", [user("system:kube-proxy")]),
        _binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            [group("system:authenticated"), group("system:unauthenticated")],
        ),
        _binding(
            "system:service-account-issuer-discovery",
            "system:service-account-issuer-discovery",
            [group("system:serviceaccounts")],
        ),
        _binding("system:volume-scheduler", "system:volume-scheduler", [user("system:kube-scheduler")]),
    ]


# -- the controllers' roles (controller_policy.go), for those nodeagent's controller manager runs ----------


def _controller_rules() -> dict[str, list[Rule]]:
    ev = events_rule()
    return {
        "certificate-controller": [
            r("delete get list watch", "certificates.k8s.io", "certificatesigningrequests"),
            r(
                "update",
                "certificates.k8s.io",
                "certificatesigningrequests/approval certificatesigningrequests/status",
            ),
            r("approve", "certificates.k8s.io", "signers", ["kubernetes.io/kube-apiserver-client-kubelet"]),
            r(
                "sign",
                "certificates.k8s.io",
                "signers",
                [
                    "kubernetes.io/kube-apiserver-client",
                    "kubernetes.io/kube-apiserver-client-kubelet",
                    "kubernetes.io/kubelet-serving",
                    "kubernetes.io/legacy-unknown",
                ],
            ),
            r("create", "authorization.k8s.io", "subjectaccessreviews"),
            ev,
        ],
        "clusterrole-aggregation-controller": [
            r("escalate get list patch update watch", "rbac.authorization.k8s.io", "clusterroles")
        ],
        "cronjob-controller": [
            r("get list update watch", "batch", "cronjobs"),
            r("create delete get list patch update watch", "batch", "jobs"),
            r("update", "batch", "cronjobs/status"),
            r("update", "batch", "cronjobs/finalizers"),
            r("delete list watch", "", "pods"),
            ev,
        ],
        "daemon-set-controller": [
            r(READ, ["apps", "extensions"], "daemonsets"),
            r("update", ["apps", "extensions"], "daemonsets/status"),
            r("update", ["apps", "extensions"], "daemonsets/finalizers"),
            r("list watch", "", "nodes"),
            r("create delete list patch watch", "", "pods"),
            r("create", "", "pods/binding"),
            r("create delete get list patch update watch", "apps", "controllerrevisions"),
            ev,
        ],
        "deployment-controller": [
            r("get list update watch", ["apps", "extensions"], "deployments"),
            r("update", ["apps", "extensions"], "deployments/status"),
            r("update", ["apps", "extensions"], "deployments/finalizers"),
            r("create delete get list patch update watch", ["apps", "extensions"], "replicasets"),
            r("get list update watch", "", "pods"),
            ev,
        ],
        "disruption-controller": [
            r(READ, ["apps", "extensions"], "deployments"),
            r(READ, ["apps", "extensions"], "replicasets"),
            r(READ, "", "replicationcontrollers"),
            r(READ, "policy", "poddisruptionbudgets"),
            r(READ, "apps", "statefulsets"),
            r("update", "policy", "poddisruptionbudgets/status"),
            r("patch update", "", "pods/status"),
            r("get", "*", "*/scale"),
            ev,
        ],
        "ephemeral-volume-controller": [
            r("get list watch", "", "pods"),
            r("update", "", "pods/finalizers"),
            r("create get list watch", "", "persistentvolumeclaims"),
            ev,
        ],
        "endpoint-controller": [
            r(READ, "", "pods services"),
            r("create delete get list update watch", "", "endpoints"),
            r("create", "", "endpoints/restricted"),
            ev,
        ],
        "endpointslice-controller": [
            r(READ, "", "nodes pods services"),
            r("update", "", "services/finalizers"),
            r("create delete get list update watch", "discovery.k8s.io", "endpointslices"),
            ev,
        ],
        "generic-garbage-collector": [r("delete get list patch update watch", "*", "*"), ev],
        "horizontal-pod-autoscaler": [
            r(READ, "autoscaling", "horizontalpodautoscalers"),
            r("update", "autoscaling", "horizontalpodautoscalers/status"),
            r("get update", "*", "*/scale"),
            r("list watch", "", "pods"),
            r("list watch", "metrics.k8s.io", "pods"),
            r(READ, "custom.metrics.k8s.io", "*"),
            r(READ, "external.metrics.k8s.io", "*"),
            ev,
        ],
        "job-controller": [
            r("get list patch update watch", "batch", "jobs"),
            r("update", "batch", "jobs/status"),
            r("update", "batch", "jobs/finalizers"),
            r("create delete list patch watch", "", "pods"),
            ev,
        ],
        "namespace-controller": [
            r("delete get list watch", "", "namespaces"),
            r("update", "", "namespaces/finalize namespaces/status"),
            r("delete deletecollection get list watch", "*", "*"),
        ],
        "node-controller": [
            r("delete get list patch update watch", "", "nodes"),
            r("patch update", "", "nodes/status"),
            r("patch update", "", "pods/status"),
            r("delete get list watch", "", "pods"),
            ev,
        ],
        "persistent-volume-binder": [
            r("create delete get list update watch", "", "persistentvolumes"),
            r("update", "", "persistentvolumes/status"),
            r("get list update watch", "", "persistentvolumeclaims"),
            r("update", "", "persistentvolumeclaims/status"),
            r("create delete get list watch", "", "pods"),
            r(READ, "storage.k8s.io", "storageclasses"),
            r("list watch", "", "nodes"),
            ev,
            r("watch", "", "events"),
        ],
        "pod-garbage-collector": [
            r("delete list watch", "", "pods"),
            r(READ, "", "nodes"),
            r("patch", "", "pods/status"),
        ],
        "pv-protection-controller": [r("get list update watch", "", "persistentvolumes"), ev],
        "pvc-protection-controller": [
            r("get list update watch", "", "persistentvolumeclaims"),
            r("update", "", "persistentvolumeclaims/status"),
            r(READ, "", "pods"),
            ev,
        ],
        "replicaset-controller": [
            r("get list update watch", ["apps", "extensions"], "replicasets"),
            r("update", ["apps", "extensions"], "replicasets/status"),
            r("update", ["apps", "extensions"], "replicasets/finalizers"),
            r("create delete list patch watch", "", "pods"),
            ev,
        ],
        "replication-controller": [
            r("get list update watch", "", "replicationcontrollers"),
            r("update", "", "replicationcontrollers/status"),
            r("update", "", "replicationcontrollers/finalizers"),
            r("create delete list patch watch", "", "pods"),
            ev,
        ],
        "resourcequota-controller": [r("list watch", "*", "*"), r("update", "", "resourcequotas/status"), ev],
        "root-ca-cert-publisher": [r("create update", "", "configmaps"), ev],
        "service-account-controller": [r("create", "", "serviceaccounts"), ev],
        "service-controller": [  # the LoadBalancer allocator (kube's service controller's role)
            r("get list watch", "", "services"),
            r("patch update", "", "services"),
            r("patch update", "", "services/status"),
            r("list watch", "", "nodes"),
            ev,
        ],
        "statefulset-controller": [
            r("list watch", "", "pods"),
            r(READ, "apps", "statefulsets"),
            r("update", "apps", "statefulsets/status"),
            r("update", "apps", "statefulsets/finalizers"),
            r("create delete get patch update", "", "pods"),
            r("create delete get list patch update watch", "apps", "controllerrevisions"),
            r("create get list watch", "", "persistentvolumeclaims"),
            r("delete update", "", "persistentvolumeclaims"),
            r("update", "", "pods/finalizers"),
            ev,
        ],
        "ttl-after-finished-controller": [r("delete get list watch", "batch", "jobs"), ev],
    }


CONTROLLER_PREFIX = "system:controller:"


def controller_roles() -> list[dict[str, Any]]:
    return [_role(CONTROLLER_PREFIX + name, rules) for name, rules in _controller_rules().items()]


# nodeagent's controllers that do the work of two of kube's: their account is bound to both roles
MERGED_DUTIES = (
    ("endpoint-controller", "endpointslice-controller"),  # Endpoints and EndpointSlices
    ("job-controller", "ttl-after-finished-controller"),
    ("pv-protection-controller", "pvc-protection-controller"),  # one controller keeps both finalizers
)  # a Job's ttlSecondsAfterFinished


def controller_role_bindings() -> list[dict[str, Any]]:
    merged = [
        _binding(
            f"nodeagent:{account}:{role}", CONTROLLER_PREFIX + role, [service_account("kube-system", account)]
        )
        for account, role in MERGED_DUTIES
    ]
    return merged + [
        _binding(CONTROLLER_PREFIX + name, CONTROLLER_PREFIX + name, [service_account("kube-system", name)])
        for name in _controller_rules()
    ]


def kubeadm_objects() -> list[dict[str, Any]]:
    """kubeadm's bootstrap-token bindings and public cluster-info, which its join flow relies on."""
    bootstrappers = group("system:bootstrappers")
    out = [
        _binding("kubeadm:kubelet-bootstrap", "system:node-bootstrapper", [bootstrappers]),
        _binding(
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            [bootstrappers],
        ),
        _binding(
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            [group("system:nodes")],
        ),
    ]
    for o in out:
        o["metadata"] = {"name": o["metadata"]["name"]}  # kubeadm's own objects carry no autoupdate
    info = "kubeadm:bootstrap-signer-clusterinfo"
    out.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": info, "namespace": "kube-public"},
            "rules": [r("get", "", "configmaps", ["cluster-info"])],
        }
    )
    out.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": info, "namespace": "kube-public"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": info},
            "subjects": [user("system:anonymous")],
        }
    )
    return out


# -- the add-ons' own accounts: what their real projects' manifests grant, limited to what ours do ----------

COREDNS = ("kube-system", "coredns")  # kubeadm's CoreDNS ServiceAccount
NETPOL = ("kube-system", "kube-router")  # kube-router's: ours is like its network policy controller
INGRESS = ("kube-system", "ingress-nginx")  # ingress-nginx's (in kube-system: ours has no namespace)
SNAPSHOTS = ("kube-system", "snapshot-controller")  # external-snapshotter's snapshot controller
INGRESS_LEASE = "nodeagent-ingress"  # the ingress leader's Lease in kube-system (ingress's LEASE_NAME)


def addon_objects() -> list[dict[str, Any]]:
    """The ClusterRoles, Roles and bindings of the embedded add-ons, each under its own ServiceAccount:
    CoreDNS's `system:coredns` (kubeadm's addon phase), kube-router's network policy part, and
    ingress-nginx's ClusterRole and Role (its leader Lease, events), with the IngressClass, GatewayClass and
    Gateway API statuses our controller writes beside ingresses/status."""
    coredns = _role("system:coredns", [
        r("list watch", "", "endpoints services pods namespaces"),
        r("list watch", "discovery.k8s.io", "endpointslices"),
    ])
    netpol = _role("kube-router", [
        r("get list watch", "", "namespaces pods"),
        r("get list watch", "networking.k8s.io", "networkpolicies"),
        events_rule(),
    ])
    gw = "gateway.networking.k8s.io"
    ingress = _role("ingress-nginx", [
        r("list watch", "", "configmaps endpoints nodes pods secrets namespaces"),
        r("get", "", "nodes"),
        r("get list watch", "", "services"),
        r("get list watch", "networking.k8s.io", "ingresses"),
        r("create patch", "", "events"),
        r("update patch", "networking.k8s.io", "ingresses/status"),
        r("get list watch create", "networking.k8s.io", "ingressclasses"),
        r("get list watch", "discovery.k8s.io", "endpointslices"),
        r("get list watch", gw, "gatewayclasses gateways httproutes referencegrants"),
        r("create", gw, "gatewayclasses"),
        r("update patch", gw, "gatewayclasses/status gateways/status httproutes/status"),
    ])
    ingress_ns, ingress_sa = INGRESS
    lease_role: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "ingress-nginx", "namespace": ingress_ns},
        "rules": [r("get update", "coordination.k8s.io", "leases", [INGRESS_LEASE]),
                  r("create", "coordination.k8s.io", "leases"),
                  r("create patch", "", "events")]}
    lease_binding = _binding("ingress-nginx", "ingress-nginx", [service_account(*INGRESS)])
    lease_binding.update(kind="RoleBinding")
    lease_binding["metadata"]["namespace"] = ingress_ns
    lease_binding["roleRef"]["kind"] = "Role"
    snap = "snapshot.storage.k8s.io"
    snapshots = _role("snapshot-controller-runner", [  # with the csi-snapshotter sidecar's duties
        r(READ, "", "persistentvolumes"),
        r("get list watch update", "", "persistentvolumeclaims"),
        r(READ, "storage.k8s.io", "storageclasses"),
        r("get", "", "nodes"),
        r("list watch create update patch", "", "events"),
        r(READ, snap, "volumesnapshotclasses"),
        r("create get list watch update delete patch", snap, "volumesnapshotcontents"),
        r("update patch", snap, "volumesnapshotcontents/status"),
        r("get list watch update patch", snap, "volumesnapshots"),
        r("update patch", snap, "volumesnapshots/status"),
    ])
    return [
        coredns, _binding("system:coredns", "system:coredns", [service_account(*COREDNS)]),
        snapshots, _binding("snapshot-controller-role", "snapshot-controller-runner",
                            [service_account(*SNAPSHOTS)]),
        netpol, _binding("kube-router", "kube-router", [service_account(*NETPOL)]),
        ingress, _binding("ingress-nginx", "ingress-nginx", [service_account(ingress_ns, ingress_sa)]),
        lease_role, lease_binding,
    ]
