"""NetworkPolicy validation and defaulting as the apiserver applies them."""

from __future__ import annotations

from nodeagent.api.defaults import apply_defaults
from nodeagent.api.validation import validate


def np(spec):
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "p", "namespace": "default"}, "spec": spec}


def fields(spec):
    return {e["field"]: e for e in validate(np(spec), "NetworkPolicy", True)}


def test_defaults_policy_types_and_protocol():
    o = np({"egress": [{"ports": [{"port": 53}]}]})
    apply_defaults(o, "NetworkPolicy")
    assert o["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert o["spec"]["podSelector"] == {}
    assert o["spec"]["egress"][0]["ports"][0]["protocol"] == "TCP"
    o = np({"podSelector": {}})
    apply_defaults(o, "NetworkPolicy")
    assert o["spec"]["policyTypes"] == ["Ingress"]
    o = np({"podSelector": {}, "policyTypes": ["Egress"]})
    apply_defaults(o, "NetworkPolicy")
    assert o["spec"]["policyTypes"] == ["Egress"]


def test_the_documentation_example_is_valid():
    assert fields({
        "podSelector": {"matchLabels": {"role": "db"}}, "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": [{"ipBlock": {"cidr": "172.17.0.0/16", "except": ["172.17.1.0/24"]}},
                              {"namespaceSelector": {"matchLabels": {"project": "myproject"}}},
                              {"podSelector": {"matchLabels": {"role": "frontend"}}}],
                     "ports": [{"protocol": "TCP", "port": 6379}]}],
        "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}], "ports": [{"protocol": "TCP", "port": 5978,
                                                                            "endPort": 6000}]}]}) == {}


def test_invalid_fields_are_reported_as_causes():
    errs = fields({
        "podSelector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]},
        "policyTypes": ["Sideways"],
        "ingress": [{"from": [{}, {"ipBlock": {"cidr": "10.0.0.0/24"}, "podSelector": {}},
                              {"ipBlock": {"cidr": "10.0.0.0/24", "except": ["10.1.0.0/24", "10.0.0.0/24"]}},
                              {"ipBlock": {"cidr": "nonsense"}}],
                     "ports": [{"port": 70000}, {"port": "http", "endPort": 90}, {"port": 90, "endPort": 80},
                               {"protocol": "ICMP"}, {"port": "Not_A_Name"}]}]})
    assert errs["spec.podSelector"]["reason"] == "FieldValueInvalid"
    assert errs["spec.policyTypes[0]"]["reason"] == "FieldValueNotSupported"
    assert errs["spec.ingress[0].from[0]"]["reason"] == "FieldValueRequired"
    assert errs["spec.ingress[0].from[1]"]["reason"] == "FieldValueForbidden"
    assert "strict subset" in errs["spec.ingress[0].from[2].ipBlock.except[0]"]["message"]
    assert "strict subset" in errs["spec.ingress[0].from[2].ipBlock.except[1]"]["message"]
    assert "valid CIDR" in errs["spec.ingress[0].from[3].ipBlock.cidr"]["message"]
    assert "between 1 and 65535" in errs["spec.ingress[0].ports[0].port"]["message"]
    assert "non-numeric" in errs["spec.ingress[0].ports[1].endPort"]["message"]
    assert "greater than or equal" in errs["spec.ingress[0].ports[2].endPort"]["message"]
    assert errs["spec.ingress[0].ports[3].protocol"]["reason"] == "FieldValueNotSupported"
    assert "port name" in errs["spec.ingress[0].ports[4].port"]["message"]
