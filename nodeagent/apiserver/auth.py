"""Bearer-token authentication from a static token file, and the authorization rules (admin, NodeRestriction).

The token file is Kubernetes' static token CSV: `token,user,uid,"group1,group2"`.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import secrets
from pathlib import Path

from kernel.fs import atomic_write
from nodeagent.api import storage

NODES_GROUP = "system:nodes"
MASTERS_GROUP = "system:masters"


@dataclasses.dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()  # user.Info's Extra, as (key, values) pairs

    @property
    def is_admin(self) -> bool:
        return MASTERS_GROUP in self.groups

    @property
    def node_name(self) -> str | None:
        if NODES_GROUP in self.groups and self.name.startswith("system:node:"):
            return self.name[len("system:node:"):]
        return None


class TokenFile:
    """Tokens loaded once at start; `issue` appends a line (atomically rewritten) and reloads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._users: dict[str, User] = {}
        self._mtime = 0.0
        self.reload()

    def reload(self) -> None:
        self._users = {}
        if not self.path.exists():
            return
        self._mtime = self.path.stat().st_mtime
        for row in csv.reader(io.StringIO(self.path.read_text())):
            if len(row) >= 2 and row[0] and not row[0].startswith("#"):
                groups = tuple(g for g in (row[3] if len(row) > 3 else "").split(",") if g)
                self._users[row[0]] = User(row[1], groups)

    def authenticate(self, header: str | None) -> User | None:
        if not header or not header.startswith("Bearer "):
            return None
        user = self._users.get(header[7:].strip())
        if user is None and self.path.exists() and self.path.stat().st_mtime != self._mtime:
            self.reload()  # a token issued since start (e.g. for a node joining)
            user = self._users.get(header[7:].strip())
        return user

    def token_for(self, user: str) -> str | None:
        for tok, u in self._users.items():
            if u.name == user:
                return tok
        return None

    def issue(self, user: str, groups: tuple[str, ...]) -> str:
        """The existing token for `user`, or a new random one written to the file."""
        tok = self.token_for(user)
        if tok:
            return tok
        tok = secrets.token_hex(24)
        lines = self.path.read_text() if self.path.exists() else ""
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow([tok, user, user, ",".join(groups)])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, lines + buf.getvalue(), 0o600)
        self.reload()
        return tok


def issue_node_token(data_dir: str | Path, node_name: str) -> str:
    """A bearer token for a node (user system:node:<name>, group system:nodes), kept in the server's token
    file."""
    return TokenFile(Path(data_dir) / "tokens.csv").issue(f"system:node:{node_name}", (NODES_GROUP,))


def cert_user(peercert: dict | None) -> User | None:
    """The user a verified client certificate names: CN the user, each O a group (x509 authentication)."""
    if not peercert:
        return None
    cn, orgs = "", []
    for rdn in peercert.get("subject") or ():
        for key, value in rdn:
            if key == "commonName":
                cn = value
            elif key == "organizationName":
                orgs.append(value)
    return User(cn, tuple(orgs)) if cn else None


READ_VERBS = {"get", "list", "watch"}
LB_LEASE_NAMESPACE, LB_LEASE_PREFIX = "kube-system", "nodeagent-lb-"


def node_may(node: str, verb: str, resource: str, subresource: str, namespace: str, name: str,
             obj: dict | None) -> str | None:
    """NodeRestriction: None when allowed, else the reason it is not. `obj` is the stored object, when there
    is one.

    A node reads freely; it may write only its own Node and Lease, the status of pods bound to it (and
    delete those pods), and events. For its local-path provisioner (a node-side component, so volumes are
    made and removed by the node that owns the disk), and its CSI driver's provisioner, it may also write
    the PersistentVolumes pinned to it by nodeAffinity, its own CSINode, and the status of claims selected
    for it (resize), as the kubelet updates claim status after a node expansion. Its LoadBalancer speaker
    elects the owner of each address through the Leases `nodeagent-lb-<ip>` in kube-system (MetalLB's
    speaker has a ServiceAccount for that; here it speaks as its node).
    """
    if verb in READ_VERBS and subresource not in ("exec", "attach", "portforward", "proxy"):
        return None
    if resource == "events":
        return None
    if resource == "serviceaccounts" and subresource == "token" and verb == "create":
        return None  # for a pod bound to this node only: the TokenRequest handler checks the bound pod
    if resource == "nodes":
        if name == node or (verb == "create" and obj is not None
                            and (obj.get("metadata") or {}).get("name") == node):
            return None
        return f"node \"{node}\" is not allowed to modify node \"{name or '<new>'}\""
    if resource == "leases" and namespace == LB_LEASE_NAMESPACE and (
            (name or ((obj or {}).get("metadata") or {}).get("name") or "").startswith(LB_LEASE_PREFIX)):
        return None  # the L2 speakers' per-address leases (a node's speaker elects owners with them)
    if resource == "csinodes":  # its own CSINode, as kube's Node authorizer allows (nodeinfomanager)
        if name == node or (verb == "create" and obj is not None
                            and (obj.get("metadata") or {}).get("name") == node):
            return None
        return f"node \"{node}\" may only write its own csinode"
    if resource == "leases":
        if namespace == "kube-node-lease" and (name == node or (
                verb == "create" and obj is not None and (obj.get("metadata") or {}).get("name") == node)):
            return None
        return f"node \"{node}\" can only access its own lease in namespace kube-node-lease"
    if resource == "pods":
        bound = ((obj or {}).get("spec") or {}).get("nodeName")
        if subresource == "status" and bound == node:
            return None
        if verb == "delete" and not subresource and bound == node:
            return None
        annotations = ((obj or {}).get("metadata") or {}).get("annotations") or {}
        mirror = "kubernetes.io/config.mirror" in annotations
        if verb == "create" and not subresource and bound == node and mirror:
            return None  # a mirror pod (the kubelet's carries an empty annotation value)
        return f"node \"{node}\" can only update the status of pods bound to it"
    if resource == "persistentvolumes" and not subresource:
        if obj is not None and pinned_node(obj) == node:
            return None
        return f"node \"{node}\" may only write persistentvolumes whose nodeAffinity pins them to it"
    if resource == "persistentvolumeclaims" and subresource == "status":
        if storage.annotations_of(obj or {}).get(storage.ANN_SELECTED_NODE) == node:
            return None
        return f"node \"{node}\" may only update the status of claims selected for it"
    return f"node \"{node}\" may not {verb} {resource}"


# labels whose value names one node: the hostname, and the CSI hostpath driver's topology key (its node id is
# the node's name), which its provisioner pins volumes with
NODE_KEYS = (storage.HOSTNAME_LABEL, "topology.hostpath.csi/node")


def pinned_node(pv: dict) -> str | None:
    """The one node a volume's nodeAffinity admits by kubernetes.io/hostname or the CSI hostpath driver's
    topology key (None: not pinned to one)."""
    terms = storage.node_affinity_terms(pv) or []
    if len(terms) != 1:
        return None
    exprs = terms[0].get("matchExpressions") or []
    if len(exprs) != 1 or terms[0].get("matchFields"):
        return None
    e = exprs[0]
    values = e.get("values") or []
    if e.get("key") in NODE_KEYS and e.get("operator") == "In" and len(values) == 1:
        return str(values[0])
    return None
