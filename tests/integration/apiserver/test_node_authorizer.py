"""The Node authorizer and NodeRestriction on a real `nodeagent server`, through kubectl 1.32 and 1.20
impersonating nodes (`--as=system:node:<n> --as-group=system:nodes`): a node reads a Secret only while a pod
bound to it refers to it, and may not label itself with a role."""

from __future__ import annotations

import json
import uuid


def as_node(kubectl, node: str, *args: str):
    return kubectl.run(f"--as=system:node:{node}", "--as-group=system:nodes", *args, check=False)


def test_a_node_reads_the_secrets_of_its_own_pods_only(kubectl):
    tag = uuid.uuid4().hex[:6]
    a, b, secret = f"node-a-{tag}", f"node-b-{tag}", f"creds-{tag}"
    kubectl("create", "secret", "generic", secret, "--from-literal=k=v")

    def pod(name: str, node: str) -> str:
        return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                           "spec": {"nodeName": node, "automountServiceAccountToken": False,
                                    "containers": [{"name": "c", "image": "busybox", "envFrom": [
                                        {"secretRef": {"name": secret}}]}]}})

    kubectl("apply", "-f", "-", input=pod(f"on-b-{tag}", b))
    p = as_node(kubectl, a, "get", "secret", secret)
    assert p.returncode == 1
    assert (f'secrets "{secret}" is forbidden: User "system:node:{a}" cannot get resource "secrets" in API '
            f'group "" in the namespace "default": no relationship found between node \'{a}\' and this object'
            ) in p.stderr
    assert as_node(kubectl, b, "get", "secret", secret).returncode == 0
    assert as_node(kubectl, b, "get", "secrets").returncode == 1  # a list of them all is not its to read
    p = as_node(kubectl, a, "auth", "can-i", "get", f"secret/{secret}")
    assert p.stdout.strip() == f"no - no relationship found between node '{a}' and this object"
    kubectl("apply", "-f", "-", input=pod(f"on-a-{tag}", a))  # now a pod on A refers to it
    assert as_node(kubectl, a, "get", "secret", secret).returncode == 0
    assert as_node(kubectl, a, "auth", "can-i", "get", f"secret/{secret}").stdout.strip() == "yes"
    kubectl("delete", "pod", f"on-a-{tag}", f"on-b-{tag}", "--wait=false")


def test_every_node_reads_the_secret_an_ingress_names_for_tls(kubectl):
    """Every node's ingress proxy serves the certificate an Ingress names, from a Secret of any type (as
    ingress-nginx): a node may get that Secret by name, and no other of the namespace."""
    tag = uuid.uuid4().hex[:6]
    node, secret, other = f"node-i-{tag}", f"site-{tag}", f"other-{tag}"
    kubectl("create", "secret", "generic", secret, "--from-literal=tls.crt=x", "--from-literal=tls.key=y")
    kubectl("create", "secret", "generic", other, "--from-literal=k=v")
    assert as_node(kubectl, node, "get", "secret", secret).returncode == 1
    ingress = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": f"web-{tag}"},
               "spec": {"tls": [{"hosts": ["a.example"], "secretName": secret}],
                        "defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}}
    kubectl("apply", "-f", "-", input=json.dumps(ingress))
    assert as_node(kubectl, node, "get", "secret", secret).returncode == 0
    assert as_node(kubectl, node, "auth", "can-i", "get", f"secret/{secret}").stdout.strip() == "yes"
    p = as_node(kubectl, node, "get", "secret", other)
    assert p.returncode == 1 and "no relationship found" in p.stderr
    assert as_node(kubectl, node, "get", "secrets").returncode == 1
    kubectl("delete", "ingress", f"web-{tag}")
    assert as_node(kubectl, node, "get", "secret", secret).returncode == 1


def test_a_node_may_not_give_itself_a_role(kubectl):
    name = f"node-{uuid.uuid4().hex[:6]}"
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}
    p = kubectl.run(f"--as=system:node:{name}", "--as-group=system:nodes", "create", "-f", "-",
                    input=json.dumps(node))
    assert p.returncode == 0, p.stderr
    p = as_node(kubectl, name, "label", "node", name, "node-role.kubernetes.io/control-plane=")
    assert p.returncode == 1
    assert f'nodes "{name}" is forbidden: is not allowed to modify labels: ' \
           "node-role.kubernetes.io/control-plane" in p.stderr
    assert as_node(kubectl, name, "label", "node", name, "rack=r1").returncode == 0
    assert as_node(kubectl, name, "label", "node", name + "x", "rack=r1").returncode == 1  # not its own
    kubectl("delete", "node", name)
