"""RBAC enforced on a real `nodeagent server`, through kubectl 1.32 and 1.20: default deny for a new
ServiceAccount, a Role and RoleBinding granting it (`kubectl auth can-i`, `--as`, `--list`), `kubectl auth
whoami`, aggregation of a labelled ClusterRole into `view`, escalation refused, impersonation checked."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid

import pytest

from nodeagent.client.rest import Client
from tests.harness.node_credential import node_kubeconfig
from tests.integration.apiserver.http import call


def sa_token(server, ns: str, name: str) -> str:
    code, out = call(
        server,
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert code == 201, out
    return out["status"]["token"]


def with_token(kubectl, token: str, *args: str, check: bool = False):
    return kubectl.run(
        "--kubeconfig",
        "/dev/null",
        "--server",
        kubectl.server.url,
        "--certificate-authority",
        str(kubectl.server.ca_file),
        "--token",
        token,
        *args,
        check=check,
    )


def new_ns(kubectl) -> str:
    ns = f"rbac-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", ns)
    kubectl("create", "serviceaccount", "app", "-n", ns)
    return ns


def test_default_deny_then_a_role_grants(kubectl, server):
    ns = new_ns(kubectl)
    sa = f"system:serviceaccount:{ns}:app"
    tok = sa_token(server, ns, "app")
    p = with_token(kubectl, tok, "get", "pods", "-n", ns)
    assert p.returncode == 1
    assert (
        f'pods is forbidden: User "{sa}" cannot list resource "pods" in API group "" in the namespace "{ns}"'
    ) in p.stderr
    p = kubectl.run("auth", "can-i", "list", "pods", "-n", ns, f"--as={sa}", check=False)
    assert (p.returncode, p.stdout.strip()) == (1, "no")
    kubectl("create", "role", "pod-reader", "--verb=get,list", "--resource=pods,pods/log", "-n", ns)
    kubectl("create", "rolebinding", "app-reads", "--role=pod-reader", f"--serviceaccount={ns}:app", "-n", ns)
    assert kubectl("auth", "can-i", "list", "pods", "-n", ns, f"--as={sa}").strip() == "yes"
    assert (
        kubectl("auth", "can-i", "get", "pods", "--subresource=log", "-n", ns, f"--as={sa}").strip() == "yes"
    )
    p = kubectl.run("auth", "can-i", "delete", "pods", "-n", ns, f"--as={sa}", check=False)
    assert p.stdout.strip() == "no"
    p = kubectl.run("auth", "can-i", "list", "pods", "-n", "default", f"--as={sa}", check=False)
    assert p.stdout.strip() == "no"
    p = with_token(kubectl, tok, "get", "pods", "-n", ns)
    assert p.returncode == 0, p.stderr
    # the token's own view of itself: can-i and --list answered by Self*Reviews
    assert with_token(kubectl, tok, "auth", "can-i", "list", "pods", "-n", ns).stdout.strip() == "yes"
    listed = with_token(kubectl, tok, "auth", "can-i", "--list", "-n", ns, check=True).stdout
    rows = {line.split()[0]: line for line in listed.splitlines()[1:] if line.strip()}
    assert "pods" in rows and "[get list]" in rows["pods"], listed
    assert "selfsubjectaccessreviews.authorization.k8s.io" in rows, listed
    kubectl("delete", "namespace", ns, "--wait=false")


def test_whoami(kubectl, server):
    ns = new_ns(kubectl)
    tok = sa_token(server, ns, "app")
    p = with_token(kubectl, tok, "auth", "whoami", "-o", "json")
    if kubectl.version == "1.20":
        assert p.returncode != 0  # kubectl 1.20 has no `auth whoami`
        code, out = call(
            server,
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            token=tok,
        )
        assert code == 201
        info = out["status"]["userInfo"]
    else:
        assert p.returncode == 0, p.stderr
        info = json.loads(p.stdout)["status"]["userInfo"]
    assert info["username"] == f"system:serviceaccount:{ns}:app"
    assert set(info["groups"]) == {
        "system:serviceaccounts",
        f"system:serviceaccounts:{ns}",
        "system:authenticated",
    }
    kubectl("delete", "namespace", ns, "--wait=false")


def test_aggregated_role_picks_up_a_labelled_clusterrole(kubectl, server):
    name = f"widgets-view-{uuid.uuid4().hex[:6]}"
    kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name, "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
                "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list"]}],
            }
        ),
    )
    want = {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list"]}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        view = json.loads(kubectl("get", "clusterrole", "view", "-o", "json"))
        if want in (view.get("rules") or []):
            break
        time.sleep(0.3)
    else:
        pytest.fail(f"view never aggregated {name}: {view.get('rules')}")
    # admin aggregates edit which aggregates view: the rule reaches admin too
    deadline = time.monotonic() + 30
    while want not in (json.loads(kubectl("get", "clusterrole", "admin", "-o", "json")).get("rules") or []):
        assert time.monotonic() < deadline, "admin never aggregated the rule"
        time.sleep(0.3)
    kubectl("delete", "clusterrole", name)
    deadline = time.monotonic() + 30
    while want in (json.loads(kubectl("get", "clusterrole", "view", "-o", "json")).get("rules") or []):
        assert time.monotonic() < deadline, "view kept a deleted role's rule"
        time.sleep(0.3)


def test_escalation_refused(kubectl, server):
    ns = new_ns(kubectl)
    user = f"dev-{uuid.uuid4().hex[:4]}"
    kubectl(
        "create", "role", "role-writer", "--verb=create,get,list", "--resource=roles,rolebindings", "-n", ns
    )
    kubectl("create", "rolebinding", "dev", "--role=role-writer", f"--user={user}", "-n", ns)
    p = kubectl.run(
        "create",
        "role",
        "pod-killer",
        "--verb=delete",
        "--resource=pods",
        "-n",
        ns,
        f"--as={user}",
        check=False,
    )
    assert p.returncode == 1
    assert (
        f'roles.rbac.authorization.k8s.io "pod-killer" is forbidden: user "{user}" '
        '(groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held'
    ) in p.stderr
    assert '{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}' in p.stderr
    assert kubectl.run("get", "role", "pod-killer", "-n", ns, check=False).returncode == 1  # nothing stored
    p = kubectl.run(
        "create",
        "rolebinding",
        "grab",
        "--clusterrole=cluster-admin",
        f"--user={user}",
        "-n",
        ns,
        f"--as={user}",
        check=False,
    )
    assert p.returncode == 1 and "is attempting to grant RBAC permissions not currently held" in p.stderr
    # a role within what the user holds is allowed
    kubectl("create", "role", "lister", "--verb=list", "--resource=roles", "-n", ns, f"--as={user}")
    kubectl("delete", "namespace", ns, "--wait=false")


def test_impersonation_needs_the_impersonate_verb(kubectl, server):
    ns = new_ns(kubectl)
    sa = f"system:serviceaccount:{ns}:app"
    tok = sa_token(server, ns, "app")
    p = with_token(kubectl, tok, "get", "pods", "-n", ns, "--as=someone")
    assert p.returncode == 1
    assert (
        f'users "someone" is forbidden: User "{sa}" cannot impersonate resource "users" in API group "" at '
        "the cluster scope"
    ) in p.stderr
    kubectl(
        "create",
        "clusterrole",
        f"{ns}-impersonator",
        "--verb=impersonate",
        "--resource=users",
        "--resource-name=someone",
    )
    kubectl(
        "create",
        "clusterrolebinding",
        f"{ns}-impersonator",
        f"--clusterrole={ns}-impersonator",
        f"--serviceaccount={ns}:app",
    )
    p = with_token(kubectl, tok, "get", "pods", "-n", ns, "--as=someone")
    assert p.returncode == 1 and 'User "someone" cannot list resource "pods"' in p.stderr  # now as someone
    p = with_token(kubectl, tok, "get", "pods", "-n", ns, "--as=someone", "--as-group=admins")
    assert p.returncode == 1 and 'cannot impersonate resource "groups"' in p.stderr
    kubectl("delete", "clusterrolebinding", f"{ns}-impersonator")
    kubectl("delete", "clusterrole", f"{ns}-impersonator")
    kubectl("delete", "namespace", ns, "--wait=false")


def test_components_run_under_their_own_identities(kubectl, server):
    """The scheduler as system:kube-scheduler, the controller manager as system:kube-controller-manager and
    each controller as its kube-system ServiceAccount (--use-service-account-credentials), not as admin."""
    sched = str(server.data_dir / "scheduler.kubeconfig")
    binding = kubectl("--kubeconfig", sched, "auth", "can-i", "create", "pods", "--subresource=binding")
    assert binding.strip() == "yes"
    p = kubectl.run("--kubeconfig", sched, "auth", "can-i", "create", "pods", check=False)
    assert p.stdout.strip() == "no"
    kcm = str(server.data_dir / "controller-manager.kubeconfig")
    assert kubectl("--kubeconfig", kcm, "auth", "can-i", "watch", "deployments.apps", "-A").strip() == "yes"
    p = kubectl.run("--kubeconfig", kcm, "auth", "can-i", "create", "pods", check=False)
    assert p.stdout.strip() == "no"
    deadline = time.monotonic() + 30
    while kubectl.run("get", "sa", "replicaset-controller", "-n", "kube-system", check=False).returncode:
        assert time.monotonic() < deadline, "the replicaset controller's ServiceAccount never appeared"
        time.sleep(0.5)
    rs = "system:serviceaccount:kube-system:replicaset-controller"
    assert kubectl("auth", "can-i", "create", "pods", "-n", "default", f"--as={rs}").strip() == "yes"
    p = kubectl.run("auth", "can-i", "delete", "nodes", f"--as={rs}", check=False)
    assert p.stdout.strip() == "no"


@pytest.mark.parametrize("form", ["absolute", "relative", "inline"])
def test_a_client_certificate_in_any_kubeconfig_form(kubectl, server, tmp_path, form):
    """A kubeconfig's client certificate is read as kubectl reads it: file paths (relative ones from the
    kubeconfig's directory) or inline -data fields. Read wrongly, the client would be system:anonymous."""
    kc = node_kubeconfig(server, "form-node", tmp_path / "node.kubeconfig", form=form)

    async def whoami() -> dict:
        async with Client.from_kubeconfig(kc) as c:
            review = await c.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                                     {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
            return review["status"]["userInfo"]

    info = asyncio.run(whoami())
    assert info["username"] == "system:node:form-node"
    assert "system:nodes" in info["groups"]
    if kubectl.version != "1.20":  # the reference: kubectl reads the same file as the same user
        p = subprocess.run([kubectl.binary, "--kubeconfig", str(kc), "auth", "whoami", "-o", "json"],
                           capture_output=True, text=True, cwd="/")
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["status"]["userInfo"]["username"] == "system:node:form-node"
