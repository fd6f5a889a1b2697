"""Which node may announce a LoadBalancer address (MetalLB's layer-2 candidates)."""

from __future__ import annotations

from typing import Any

from nodeagent.lbspeaker import election


def svc(name: str, ip: str, local: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local" if local else "Cluster"},
            "status": {"loadBalancer": {"ingress": [{"ip": ip}]}}}


def slice_(svc_name: str, *eps: tuple[str, bool]) -> dict[str, Any]:
    return {"metadata": {"name": f"{svc_name}-x", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": svc_name}},
            "endpoints": [{"addresses": ["10.0.0.1"], "nodeName": n, "conditions": {"ready": r}}
                          for n, r in eps]}


def test_shared_address_has_one_lease_and_every_service() -> None:
    got = election.by_address([svc("a", "192.0.2.10"), svc("b", "192.0.2.10"), svc("c", "192.0.2.11")])
    assert {ip: [s["metadata"]["name"] for s in v] for ip, v in got.items()} == \
        {"192.0.2.10": ["a", "b"], "192.0.2.11": ["c"]}
    assert election.lease_name("192.0.2.10") == "nodeagent-lb-192.0.2.10"


def test_local_policy_needs_a_ready_local_endpoint() -> None:
    slices = election.slices_by_service([slice_("a", ("n1", True), ("n2", False))])
    s = svc("a", "192.0.2.10", local=True)
    assert election.eligible({}, [s], slices, "n1") == (True, "")
    ok, why = election.eligible({}, [s], slices, "n2")
    assert not ok and "no ready local endpoint of default/a" in why
    assert election.eligible({}, [svc("a", "192.0.2.10")], slices, "n3")[0]  # Cluster policy: any node


def test_excluded_node_never_announces() -> None:
    node = {"metadata": {"labels": {election.EXCLUDE_LABEL: ""}}}
    assert not election.eligible(node, [svc("a", "192.0.2.10")], {}, "n1")[0]
