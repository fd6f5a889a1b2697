"""Status bodies byte for byte as kube-apiserver writes them (bodies captured from real clusters' answers)."""

from nodeagent.api.resources import builtin
from nodeagent.api.status import status_body
from nodeagent.apiserver import errors
from nodeagent.apiserver.codec import dumps
from nodeagent.apiserver.handlers import success_status

# Each captured from a kube-apiserver response quoted in a public issue, log or client fixture.
ALREADY_EXISTS_GROUP = (
    b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"jobs.batch '
    b'\\"pipeline-19ee700c-fix6\\" already exists","reason":"AlreadyExists","details":{"name":'
    b'"pipeline-19ee700c-fix6","group":"batch","kind":"jobs"},"code":409}')
ALREADY_EXISTS_CORE = (
    b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"persistentvolumes '
    b'\\"mysql-instance-pv\\" already exists","reason":"AlreadyExists","details":{"name":"mysql-instance-pv",'
    b'"kind":"persistentvolumes"},"code":409}')
FORBIDDEN = (
    b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"namespaces '
    b'\\"kube-system\\" is forbidden: User \\"system:serviceaccount:prefect:prefect-worker\\" cannot get '
    b'resource \\"namespaces\\" in API group \\"\\" in the namespace \\"kube-system\\"","reason":"Forbidden",'
    b'"details":{"name":"kube-system","kind":"namespaces"},"code":403}')
INVALID_GROUP = (
    b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"IngressRoute.traefik.'
    b'containo.us \\"traefik-dashboard\\" is invalid: spec: Required value","reason":"Invalid","details":'
    b'{"name":"traefik-dashboard","group":"traefik.containo.us","kind":"IngressRoute","causes":[{"reason":'
    b'"FieldValueRequired","message":"Required value","field":"spec"}]},"code":422}')
DELETED = (
    b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","details":{"name":"pulp-operator",'
    b'"group":"operators.coreos.com","kind":"subscriptions","uid":"75d1ad18-fdc7-42ac-a3fe-95bcf9fb8f7b"}}')
WATCH_EXPIRED = (
    b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource '
    b'version: 1 (260)","reason":"Expired","code":410}')


def test_already_exists_with_and_without_group():
    assert dumps(errors.already_exists("jobs", "pipeline-19ee700c-fix6", "batch").status()) \
        == ALREADY_EXISTS_GROUP
    assert dumps(errors.already_exists("persistentvolumes", "mysql-instance-pv").status()) \
        == ALREADY_EXISTS_CORE


def test_forbidden():
    e = errors.forbidden("system:serviceaccount:prefect:prefect-worker", "get", "namespaces", "",
                         "kube-system", "kube-system")
    assert dumps(e.status()) == FORBIDDEN


def test_invalid_causes_in_go_order():
    # the cause dict is built in another order on purpose: the body still comes out in Go's
    e = errors.invalid("IngressRoute", "traefik-dashboard",
                       [{"field": "spec", "message": "Required value", "reason": "FieldValueRequired"}],
                       "traefik.containo.us")
    assert dumps(e.status()) == INVALID_GROUP


def test_delete_success():
    res = builtin("apps", "v1", "deployments")
    body = success_status(res, {"metadata": {"name": "pulp-operator",
                                             "uid": "75d1ad18-fdc7-42ac-a3fe-95bcf9fb8f7b"}})
    body["details"]["kind"] = "subscriptions"
    body["details"]["group"] = "operators.coreos.com"
    assert dumps(status_body("Success", details=body["details"])) == DELETED
    assert list(success_status(res, {"metadata": {"name": "x", "uid": "u"}})["details"]) \
        == ["name", "group", "kind", "uid"]


def test_watch_error_event_object():
    assert dumps(errors.gone("too old resource version: 1 (260)").status()) == WATCH_EXPIRED
