"""Service variables against kubelet's envvars_test.go, and the container environment as
makeEnvironmentVariables builds it (precedence, expansion, every valueFrom kind, optional refs, errors)."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import pytest

from nodeagent.kubelet.envvars import (
    EnvError,
    NotFound,
    PodContext,
    from_services,
    make_environment,
    service_env,
)


def _svc(name: str, ip: str, ports: list[dict[str, Any]], ns: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"clusterIP": ip, "ports": ports}}


def test_from_services() -> None:
    """TestFromServices, with its services and its expected variables in its order."""
    services = [
        _svc("foo-bar", "1.2.3.4", [{"port": 8080, "protocol": "TCP"}]),
        _svc("abc-123", "5.6.7.8", [{"name": "u-d-p", "port": 8081, "protocol": "UDP"},
                                    {"name": "t-c-p", "port": 8081, "protocol": "TCP"}]),
        _svc("q-u-u-x", "9.8.7.6", [{"port": 8082, "protocol": "TCP"},
                                    {"name": "8083", "port": 8083, "protocol": "TCP"}]),
        _svc("svrc-clusterip-none", "None", [{"port": 8082, "protocol": "TCP"}]),
        _svc("svrc-clusterip-empty", "", [{"port": 8082, "protocol": "TCP"}]),
        _svc("super-ipv6", "2001:DB8::", [{"name": "u-d-p", "port": 8084, "protocol": "UDP"},
                                          {"name": "t-c-p", "port": 8084, "protocol": "TCP"}]),
        _svc("sctp-1", "1.2.3.4", [{"port": 777, "protocol": "SCTP"}]),
    ]
    expected = [
        ("FOO_BAR_SERVICE_HOST", "1.2.3.4"),
        ("FOO_BAR_SERVICE_PORT", "8080"),
        ("FOO_BAR_PORT", "tcp://1.2.3.4:8080"),
        ("FOO_BAR_PORT_8080_TCP", "tcp://1.2.3.4:8080"),
        ("FOO_BAR_PORT_8080_TCP_PROTO", "tcp"),
        ("FOO_BAR_PORT_8080_TCP_PORT", "8080"),
        ("FOO_BAR_PORT_8080_TCP_ADDR", "1.2.3.4"),
        ("ABC_123_SERVICE_HOST", "5.6.7.8"),
        ("ABC_123_SERVICE_PORT", "8081"),
        ("ABC_123_SERVICE_PORT_U_D_P", "8081"),
        ("ABC_123_SERVICE_PORT_T_C_P", "8081"),
        ("ABC_123_PORT", "udp://5.6.7.8:8081"),
        ("ABC_123_PORT_8081_UDP", "udp://5.6.7.8:8081"),
        ("ABC_123_PORT_8081_UDP_PROTO", "udp"),
        ("ABC_123_PORT_8081_UDP_PORT", "8081"),
        ("ABC_123_PORT_8081_UDP_ADDR", "5.6.7.8"),
        ("ABC_123_PORT_8081_TCP", "tcp://5.6.7.8:8081"),
        ("ABC_123_PORT_8081_TCP_PROTO", "tcp"),
        ("ABC_123_PORT_8081_TCP_PORT", "8081"),
        ("ABC_123_PORT_8081_TCP_ADDR", "5.6.7.8"),
        ("Q_U_U_X_SERVICE_HOST", "9.8.7.6"),
        ("Q_U_U_X_SERVICE_PORT", "8082"),
        ("Q_U_U_X_SERVICE_PORT_8083", "8083"),
        ("Q_U_U_X_PORT", "tcp://9.8.7.6:8082"),
        ("Q_U_U_X_PORT_8082_TCP", "tcp://9.8.7.6:8082"),
        ("Q_U_U_X_PORT_8082_TCP_PROTO", "tcp"),
        ("Q_U_U_X_PORT_8082_TCP_PORT", "8082"),
        ("Q_U_U_X_PORT_8082_TCP_ADDR", "9.8.7.6"),
        ("Q_U_U_X_PORT_8083_TCP", "tcp://9.8.7.6:8083"),
        ("Q_U_U_X_PORT_8083_TCP_PROTO", "tcp"),
        ("Q_U_U_X_PORT_8083_TCP_PORT", "8083"),
        ("Q_U_U_X_PORT_8083_TCP_ADDR", "9.8.7.6"),
        ("SUPER_IPV6_SERVICE_HOST", "2001:DB8::"),
        ("SUPER_IPV6_SERVICE_PORT", "8084"),
        ("SUPER_IPV6_SERVICE_PORT_U_D_P", "8084"),
        ("SUPER_IPV6_SERVICE_PORT_T_C_P", "8084"),
        ("SUPER_IPV6_PORT", "udp://[2001:DB8::]:8084"),
        ("SUPER_IPV6_PORT_8084_UDP", "udp://[2001:DB8::]:8084"),
        ("SUPER_IPV6_PORT_8084_UDP_PROTO", "udp"),
        ("SUPER_IPV6_PORT_8084_UDP_PORT", "8084"),
        ("SUPER_IPV6_PORT_8084_UDP_ADDR", "2001:DB8::"),
        ("SUPER_IPV6_PORT_8084_TCP", "tcp://[2001:DB8::]:8084"),
        ("SUPER_IPV6_PORT_8084_TCP_PROTO", "tcp"),
        ("SUPER_IPV6_PORT_8084_TCP_PORT", "8084"),
        ("SUPER_IPV6_PORT_8084_TCP_ADDR", "2001:DB8::"),
        ("SCTP_1_SERVICE_HOST", "1.2.3.4"),
        ("SCTP_1_SERVICE_PORT", "777"),
        ("SCTP_1_PORT", "sctp://1.2.3.4:777"),
        ("SCTP_1_PORT_777_SCTP", "sctp://1.2.3.4:777"),
        ("SCTP_1_PORT_777_SCTP_PROTO", "sctp"),
        ("SCTP_1_PORT_777_SCTP_PORT", "777"),
        ("SCTP_1_PORT_777_SCTP_ADDR", "1.2.3.4"),
    ]
    assert from_services(services) == expected


CLUSTER = [
    _svc("kubernetes", "10.0.0.1", [{"name": "https", "port": 443, "protocol": "TCP"}], ns="default"),
    _svc("web", "10.0.0.2", [{"port": 80}], ns="default"),
    _svc("db", "10.0.0.3", [{"port": 5432}], ns="team"),
    _svc("headless", "None", [{"port": 1}], ns="team"),
]


def test_master_service_always_and_namespace_services_with_links() -> None:
    env = service_env(CLUSTER, "team", enable_service_links=True)
    assert env["KUBERNETES_SERVICE_HOST"] == "10.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT"] == "443"
    assert env["KUBERNETES_SERVICE_PORT_HTTPS"] == "443"
    assert env["KUBERNETES_PORT_443_TCP_ADDR"] == "10.0.0.1"
    assert env["DB_SERVICE_HOST"] == "10.0.0.3"
    assert "WEB_SERVICE_HOST" not in env  # another namespace's Service
    assert not any(k.startswith("HEADLESS") for k in env)


def test_links_off_keeps_only_the_master_service() -> None:
    env = service_env(CLUSTER, "team", enable_service_links=False)
    assert {k.split("_")[0] for k in env} == {"KUBERNETES"}
    assert service_env(CLUSTER, "default", enable_service_links=False).keys() == \
        service_env(CLUSTER, "team", enable_service_links=False).keys()


def test_a_namespace_service_named_kubernetes_wins_over_the_master_one_with_links() -> None:
    mine = _svc("kubernetes", "10.0.0.9", [{"port": 8443}], ns="team")
    for order in ([*CLUSTER, mine], [mine, *CLUSTER]):
        assert service_env(order, "team", True)["KUBERNETES_SERVICE_HOST"] == "10.0.0.9"
        assert service_env(order, "team", False)["KUBERNETES_SERVICE_HOST"] == "10.0.0.1"


# -- makeEnvironmentVariables -----------------------------------------------------------------------------


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


OBJECTS: dict[str, dict[str, Any]] = {
    "secret/creds": {"data": {"password": _b64("s3cret"), "user": _b64("admin"),
                              "1st": _b64("digit-first"), "bad=key": _b64("x")}},
    "configmap/settings": {"data": {"MODE": "prod", "LEVEL": "debug", "bad key": "spaced", "bäd": "x"}},
}


def _getter(kind: str):
    def get(namespace: str, name: str) -> Mapping[str, Any]:
        obj = OBJECTS.get(f"{kind}/{name}")
        if obj is None:
            raise NotFound(f'{kind} "{name}" not found')
        return obj
    return get


POD: dict[str, Any] = {
    "metadata": {"name": "p1", "namespace": "team", "uid": "u-1", "labels": {"app": "web"},
                 "annotations": {"note": "hi"}},
    "spec": {"nodeName": "node-a", "serviceAccountName": "robot",
             "containers": [{"name": "c", "resources": {"limits": {"memory": "64Mi"},
                                                        "requests": {"cpu": "250m"}}}]},
    "status": {},
}


def _build(container: dict[str, Any], services: Mapping[str, str] | None = None,
           ctx: PodContext | None = None) -> dict[str, str]:
    c = {"name": "c", "resources": POD["spec"]["containers"][0]["resources"], **container}
    env = make_environment(POD, c, get_secret=_getter("secret"), get_configmap=_getter("configmap"),
                           services=services or {},
                           ctx=ctx or PodContext(("10.1.0.5", "fd00::5"), ("192.0.2.1",),
                                                 {"cpu": "2", "memory": "1Gi"}))
    return env.as_dict()


def test_values_expand_against_earlier_variables_and_services() -> None:
    env = _build({"env": [{"name": "A", "value": "one"}, {"name": "B", "value": "$(A)-two-$(LATER)"},
                          {"name": "LATER", "value": "x"},
                          {"name": "C", "value": "$$(A) $(SVC_SERVICE_HOST)"}]},
                 services={"SVC_SERVICE_HOST": "10.0.0.7"})
    assert env["B"] == "one-two-$(LATER)"
    assert env["C"] == "$(A) 10.0.0.7"
    assert env["SVC_SERVICE_HOST"] == "10.0.0.7"


def test_pod_env_overrides_service_env_and_env_overrides_env_from() -> None:
    env = _build({"envFrom": [{"configMapRef": {"name": "settings"}}],
                  "env": [{"name": "MODE", "value": "test"}, {"name": "SVC_SERVICE_HOST", "value": "mine"}]},
                 services={"SVC_SERVICE_HOST": "10.0.0.7"})
    assert env["MODE"] == "test"
    assert env["LEVEL"] == "debug"
    assert env["SVC_SERVICE_HOST"] == "mine"


def test_env_from_prefix_and_invalid_keys_are_skipped_with_a_warning() -> None:
    c = {"name": "c", "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "CFG_"},
                                  {"secretRef": {"name": "creds"}}]}
    env = make_environment(POD, c, get_secret=_getter("secret"), get_configmap=_getter("configmap"),
                           services={})
    d = env.as_dict()
    assert d["CFG_MODE"] == "prod" and d["password"] == "s3cret"
    # 1.32's relaxed names: a digit first or a space is taken; '=' or a non-ASCII byte is skipped
    assert d["1st"] == "digit-first" and d["CFG_bad key"] == "spaced"
    assert "bad=key" not in d and "CFG_bäd" not in d
    assert env.warnings == [
        "Keys [CFG_bäd] from the EnvFrom configMap team/settings were skipped since they are considered "
        "invalid environment variable names.",
        "Keys [bad=key] from the EnvFrom secret team/creds were skipped since they are considered invalid "
        "environment variable names."]


def test_secret_and_config_map_key_refs() -> None:
    env = _build({"env": [
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        {"name": "LVL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "LEVEL"}}},
        {"name": "URL", "value": "db://$(PW)@host"}]})
    assert (env["PW"], env["LVL"], env["URL"]) == ("s3cret", "debug", "db://s3cret@host")


def test_field_refs() -> None:
    refs = {"N": "metadata.name", "NS": "metadata.namespace", "UID": "metadata.uid",
            "L": "metadata.labels['app']", "A": "metadata.annotations['note']", "NODE": "spec.nodeName",
            "SA": "spec.serviceAccountName", "HIP": "status.hostIP", "HIPS": "status.hostIPs",
            "PIP": "status.podIP", "PIPS": "status.podIPs"}
    env = _build({"env": [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in refs.items()]})
    assert {k: env[k] for k in refs} == {
        "N": "p1", "NS": "team", "UID": "u-1", "L": "web", "A": "hi", "NODE": "node-a", "SA": "robot",
        "HIP": "192.0.2.1", "HIPS": "192.0.2.1", "PIP": "10.1.0.5", "PIPS": "10.1.0.5,fd00::5"}


def test_resource_field_refs_with_divisor_and_allocatable_when_no_limit() -> None:
    env = _build({"env": [
        {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
        {"name": "CPU_REQ", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1m"}}},
        {"name": "CPU_LIM", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}}]})
    assert (env["MEM"], env["CPU_REQ"], env["CPU_LIM"]) == ("64", "250", "2")


def test_optional_references_that_are_missing_leave_the_variable_unset() -> None:
    env = _build({"envFrom": [{"secretRef": {"name": "nope", "optional": True}}],
                  "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k",
                                                                         "optional": True}}},
                          {"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "nokey",
                                                                            "optional": True}}}]})
    assert "X" not in env and "Y" not in env


@pytest.mark.parametrize(("entry", "message"), [
    ({"secretKeyRef": {"name": "nope", "key": "k"}}, 'secret "nope" not found'),
    ({"configMapKeyRef": {"name": "nope", "key": "k"}}, 'configmap "nope" not found'),
    ({"secretKeyRef": {"name": "creds", "key": "k"}}, "couldn't find key k in Secret team/creds"),
    ({"configMapKeyRef": {"name": "settings", "key": "k"}}, "couldn't find key k in ConfigMap team/settings"),
])
def test_missing_required_references_fail_with_kubelets_message(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(EnvError) as e:
        _build({"env": [{"name": "X", "valueFrom": entry}]})
    assert str(e.value) == message


def test_missing_env_from_source_fails_unless_optional() -> None:
    with pytest.raises(NotFound, match='configmap "gone" not found'):
        _build({"envFrom": [{"configMapRef": {"name": "gone"}}]})
