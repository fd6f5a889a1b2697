import pytest

from nodeagent.api import selectors as s


@pytest.mark.parametrize("sel,labels,ok", [
    ("app=web", {"app": "web"}, True),
    ("app==web", {"app": "db"}, False),
    ("app!=web", {}, True),
    ("app in (web, db),tier", {"app": "db", "tier": "x"}, True),
    ("app notin (web)", {"app": "web"}, False),
    ("!canary", {"canary": "1"}, False),
    ("!canary,app", {"app": "a"}, True),
    ("example.com/role=x", {"example.com/role": "x"}, True),
    ("", {"anything": "1"}, True),
])
def test_string_selectors(sel, labels, ok):
    assert s.parse_label_selector(sel).matches(labels) is ok


@pytest.mark.parametrize("bad", ["app=", "app in web", "app in ()", "=x", "a b", "app in (x"])
def test_bad_string_selectors(bad):
    with pytest.raises(s.SelectorError):
        s.parse_label_selector(bad)


def test_label_selector_dicts():
    sel = s.from_label_selector({"matchLabels": {"app": "web"},
                                 "matchExpressions": [{"key": "tier", "operator": "NotIn",
                                                       "values": ["db"]}]})
    assert sel.matches({"app": "web"})
    assert not sel.matches({"app": "web", "tier": "db"})
    assert s.from_label_selector({}).matches({})
    assert not s.from_label_selector(None).matches({"a": "b"})
    assert s.from_label_selector(None, none_matches=False).matches({})
    with pytest.raises(s.SelectorError):
        s.from_label_selector({"matchExpressions": [{"key": "a", "operator": "In"}]})


def test_node_selector_terms():
    node = {"metadata": {"name": "n1", "labels": {"zone": "a", "cpus": "8"}}}
    assert s.node_matches_selector_terms(node, [{"matchExpressions": [{"key": "cpus", "operator": "Gt",
                                                                       "values": ["4"]}]}])
    assert not s.node_matches_selector_terms(node, [{"matchExpressions": [{"key": "zone", "operator": "In",
                                                                           "values": ["b"]}]}])
    assert s.node_matches_selector_terms(node, [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
    ])
    assert not s.node_matches_selector_terms(node, [{}])


def test_field_selectors():
    pod = {"metadata": {"name": "p", "namespace": "default"}, "spec": {"nodeName": "n1"},
           "status": {"phase": "Running"}}
    reqs = s.parse_field_selector("metadata.name=p,spec.nodeName!=n2,status.phase==Running")
    assert s.fields_match(pod, reqs)
    assert not s.fields_match(pod, s.parse_field_selector("spec.nodeName="))
    assert s.fields_match({"spec": {}}, s.parse_field_selector("spec.nodeName="))
    with pytest.raises(s.SelectorError):
        s.parse_field_selector("nonsense")
