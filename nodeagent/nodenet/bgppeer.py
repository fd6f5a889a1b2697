"""BGPPeer (`bgppeers.nodeagent.io`): a router outside the cluster the bgp pod network peers with, shaped as
Calico's BGPPeer (spec.peerIP, spec.asNumber, spec.nodeSelector in Calico's selector syntax).

The server's `podnetwork` component installs the definition in bgp mode (and lets every node read the peers,
as calico-node's ClusterRole does); each node's agent renders a session for every peer whose nodeSelector
selects its Node. The CRD's schema refuses what the agents could not honour (a selector outside the
supported subset, a bad address or AS) when it is written, with the field and the reason.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nodeagent.client.rest import Client, ClientError
from nodeagent.nodenet.birdconf import ExternalPeer

GROUP = "nodeagent.io"
VERSION = "v1"
PLURAL = "bgppeers"
RESOURCE = f"{GROUP}/{VERSION}/{PLURAL}"
READER_ROLE = "nodeagent:bgp-peer-reader"

# Calico's selector syntax, the subset honoured here: all(), has(k), !has(k), k == 'v', k != 'v',
# k in {'a', 'b'}, k not in {'a'}, joined with &&.
_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VAL = r"'[^']*'|\"[^\"]*\""
_SET = rf"\{{\s*(?:(?:{_VAL})(?:\s*,\s*(?:{_VAL}))*)?\s*\}}"
_CLAUSE = (rf"(all\(\)|!?\s*has\(\s*{_KEY}\s*\)|{_KEY}\s*(==|!=)\s*({_VAL})"
           rf"|{_KEY}\s+(not\s+)?in\s+{_SET})")
SELECTOR_PATTERN = rf"^\s*({_CLAUSE}(\s*&&\s*{_CLAUSE})*)?\s*$"
PEER_IP_PATTERN = (r"^((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])"
                   r"(:([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5]))?$")


def crd() -> dict[str, Any]:
    spec_schema = {
        "type": "object",
        "description": "A BGP peer outside the cluster (Calico's BGPPeer fields).",
        "required": ["peerIP", "asNumber"],
        "properties": {
            "peerIP": {"type": "string", "pattern": PEER_IP_PATTERN,
                       "description": "The peer's IPv4 address, optionally with :port (default 179)."},
            "asNumber": {"type": "integer", "format": "int64", "minimum": 1, "maximum": 4294967295,
                         "description": "The peer's AS number."},
            "nodeSelector": {"type": "string", "pattern": SELECTOR_PATTERN,
                             "description": "Which nodes peer with it, in Calico's selector syntax (all(), "
                                            "has(k), !has(k), k == 'v', k != 'v', k in {'a'}, "
                                            "k not in {'a'}, joined with &&). Unset: every node."},
        },
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{PLURAL}.{GROUP}"},
        "spec": {
            "group": GROUP, "scope": "Cluster",
            "names": {"plural": PLURAL, "singular": "bgppeer", "kind": "BGPPeer", "listKind": "BGPPeerList"},
            "versions": [{
                "name": VERSION, "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "required": ["spec"], "properties": {
                    "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                    "metadata": {"type": "object"}, "spec": spec_schema}}},
                "additionalPrinterColumns": [
                    {"name": "Peer IP", "type": "string", "jsonPath": ".spec.peerIP"},
                    {"name": "AS", "type": "integer", "jsonPath": ".spec.asNumber"},
                    {"name": "Node Selector", "type": "string", "jsonPath": ".spec.nodeSelector"}],
            }],
        },
    }


def reader_objects() -> list[tuple[str, dict[str, Any]]]:
    """Every node may read the peers (calico-node's ClusterRole does the same for its agents)."""
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": READER_ROLE},
            "rules": [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list", "watch"]}]}
    rbac = "rbac.authorization.k8s.io"
    binding = {"apiVersion": f"{rbac}/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": READER_ROLE},
               "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": READER_ROLE},
               "subjects": [{"apiGroup": rbac, "kind": "Group", "name": "system:nodes"}]}
    return [("clusterroles", role), ("clusterrolebindings", binding)]


async def install(client: Client) -> list[str]:
    """The definition and the nodes' read access, where missing; what was created."""
    made = []
    for resource, obj in [("apiextensions.k8s.io/v1/customresourcedefinitions", crd()), *reader_objects()]:
        try:
            await client.create(resource, obj)
            made.append(f"{obj['kind']} {obj['metadata']['name']}")
        except ClientError as e:
            if not e.already_exists and not e.conflict:
                raise
    return made


def parse_selector(expr: str | None) -> Callable[[Mapping[str, str]], bool]:
    """Calico's selector (the supported subset) as a predicate over a Node's labels; ValueError for
    anything else."""
    text = (expr or "").strip()
    if not text:
        return lambda _labels: True
    if not re.fullmatch(SELECTOR_PATTERN, text):
        raise ValueError(f"nodeSelector {expr!r}: not in the supported selector syntax (all(), has(k), "
                         "!has(k), k == 'v', k != 'v', k in {'a'}, k not in {'a'}, joined with &&)")
    tests: list[Callable[[Mapping[str, str]], bool]] = []
    for clause in (c.strip() for c in text.split("&&")):
        tests.append(_clause(clause))
    return lambda labels: all(t(labels) for t in tests)


def _values(s: str) -> set[str]:
    return {m.group(0)[1:-1] for m in re.finditer(_VAL, s)}


def _clause(c: str) -> Callable[[Mapping[str, str]], bool]:
    if c == "all()":
        return lambda _l: True
    m = re.fullmatch(rf"(!?)\s*has\(\s*({_KEY})\s*\)", c)
    if m:
        neg, key = m.group(1) == "!", m.group(2)
        return lambda lab: (key in lab) != neg
    m = re.fullmatch(rf"({_KEY})\s*(==|!=)\s*({_VAL})", c)
    if m:
        key, op, val = m.group(1), m.group(2), m.group(3)[1:-1]
        if op == "==":
            return lambda lab: lab.get(key) == val
        return lambda lab: lab.get(key) != val
    m = re.fullmatch(rf"({_KEY})\s+(not\s+)?in\s+(.*)", c, re.S)
    if m:
        key, neg, vals = m.group(1), bool(m.group(2)), _values(m.group(3))
        return lambda lab: (lab.get(key) in vals) != neg
    raise ValueError(f"nodeSelector clause {c!r} is not supported")


def split_peer_ip(value: str) -> tuple[str, int]:
    host, _, port = value.partition(":")
    return str(ipaddress.IPv4Address(host)), int(port or 179)


def peers_for(node: Mapping[str, Any], peers: Iterable[Mapping[str, Any]],
              problems: list[str] | None = None) -> tuple[ExternalPeer, ...]:
    """The BGPPeers that select this node, as sessions to render. A peer that cannot be honoured (written
    before the schema, or edited around it) is left out and said in `problems`."""
    labels = ((node.get("metadata") or {}).get("labels")) or {}
    out = []
    for p in peers:
        name = (p.get("metadata") or {}).get("name", "")
        spec = p.get("spec") or {}
        try:
            selected = parse_selector(spec.get("nodeSelector"))(labels)
            ip, port = split_peer_ip(str(spec.get("peerIP", "")))
            asn = int(spec.get("asNumber", 0))
            if not 1 <= asn <= 4294967295:
                raise ValueError(f"asNumber {asn}: 1 to 4294967295")
        except (ValueError, TypeError) as e:
            if problems is not None:
                problems.append(f"BGPPeer {name}: {e}")
            continue
        if selected:
            out.append(ExternalPeer(name, ip, asn, node_specific=bool(spec.get("nodeSelector")), port=port))
    seen: dict[tuple[str, int], ExternalPeer] = {}
    for peer in sorted(out, key=lambda x: (x.ip, x.port, x.name)):
        first = seen.setdefault((peer.ip, peer.port), peer)
        if first is not peer and problems is not None:  # one session per address: the first name wins
            problems.append(f"BGPPeer {peer.name}: {peer.ip}:{peer.port} is already BGPPeer {first.name}")
    return tuple(seen.values())
