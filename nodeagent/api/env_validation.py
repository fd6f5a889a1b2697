"""A container's `env` and `envFrom`, validated as kube-apiserver 1.32 validates them (ValidateEnv,
validateEnvVarValueFrom, validateEnvFrom in pkg/apis/core/validation), with
RelaxedEnvironmentVariableValidation on (beta and on by default since 1.32): a name is any printable
ASCII but '='. Without these checks a `valueFrom` naming two sources, or none, was stored and then
half-honoured by the kubelet."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from nodeagent.api.names import dns1123_subdomain
from nodeagent.api.quantity import QuantityError, parse_quantity

FieldErrors = list[dict[str, str]]

RELAXED_NAME_MESSAGE = ("a valid environment variable name must consist only of printable ASCII characters "
                        "other than '='")
# validEnvDownwardAPIFieldPathExpressions
ENV_FIELD_PATHS = ("metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName",
                   "spec.serviceAccountName", "status.hostIP", "status.hostIPs", "status.podIP",
                   "status.podIPs")
# What ConvertDownwardAPIFieldLabel knows for v1 pods (before the env-specific subset above is applied).
_CONVERTIBLE = ENV_FIELD_PATHS + ("metadata.annotations", "metadata.labels", "spec.restartPolicy",
                                  "spec.schedulerName", "status.phase")
RESOURCE_FIELDS = ("limits.cpu", "limits.ephemeral-storage", "limits.memory", "requests.cpu",
                   "requests.ephemeral-storage", "requests.memory")
_SUBSCRIPTED = re.compile(r"^([^\[]+)\['(.*)'\]$")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_CPU_DIVISORS: tuple[str, ...] = ("1m", "1")
_BYTE_DIVISORS: tuple[str, ...] = ("1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi",
                                   "1Ei")


def _err(reason: str, field: str, message: str) -> dict[str, str]:
    return {"reason": reason, "message": message, "field": field}


def _invalid(field: str, value: Any, detail: str) -> dict[str, str]:
    shown = f'"{value}"' if isinstance(value, str) else str(value)
    return _err("FieldValueInvalid", field, f"Invalid value: {shown}: {detail}")


def _required(field: str) -> dict[str, str]:
    return _err("FieldValueRequired", field, "Required value")


def _unsupported(field: str, value: str, supported: tuple[str, ...]) -> dict[str, str]:
    listed = ", ".join(f'"{s}"' for s in sorted(supported))
    return _err("FieldValueNotSupported", field, f'Unsupported value: "{value}": supported values: {listed}')


def relaxed_env_var_name(value: str) -> list[str]:
    """IsRelaxedEnvVarName: printable ASCII (32–126) except '='."""
    if not value:
        return ["environment variable name must be non-empty"]
    if any(not 32 <= ord(ch) <= 126 or ch == "=" for ch in value):
        return [RELAXED_NAME_MESSAGE]
    return []


def config_map_key(value: str) -> list[str]:
    """IsConfigMapKey, worded as apimachinery's validation words it."""
    out = []
    if len(value) > 253:
        out.append("must be no more than 253 characters")
    if not _CONFIG_KEY.match(value):
        out.append("a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
                   "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is "
                   "'[-._a-zA-Z0-9]+')")
    if value == ".":
        out.append("must not be '.'")
    elif value == "..":
        out.append("must not be '..'")
    elif value.startswith(".."):
        out.append("must not start with '..'")
    return out


def _qualified_name(value: str, field: str) -> FieldErrors:
    """ValidateQualifiedName of a label or annotation key named in a fieldRef subscript."""
    prefix, _, name = value.rpartition("/")
    errs: FieldErrors = []
    if value.count("/") > 1:
        return [_invalid(field, value, "a qualified name must consist of alphanumeric characters, '-', '_' "
                         "or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or "
                         "'my.name',  or '123-abc', regex used for validation is "
                         "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix "
                         "and '/' (e.g. 'example.com/MyName')")]
    if "/" in value:
        if not prefix:
            errs.append(_invalid(field, value, "prefix part must be non-empty"))
        else:
            errs += [_invalid(field, value, "prefix part " + m) for m in dns1123_subdomain(prefix)]
    if not name:
        errs.append(_invalid(field, value, "name part must be non-empty"))
    elif len(name) > 63:
        errs.append(_invalid(field, value, "name part must be no more than 63 characters"))
    elif not _QUALIFIED.match(name):
        errs.append(_invalid(field, value, "name part must consist of alphanumeric characters, '-', '_' or "
                             "'.', and must start and end with an alphanumeric character (e.g. 'MyName',  or "
                             "'my.name',  or '123-abc', regex used for validation is "
                             "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"))
    return errs


def _field_ref(ref: dict[str, Any], base: str) -> FieldErrors:
    """validateObjectFieldSelector with the env var's set of field paths."""
    if not ref.get("apiVersion"):
        return [_required(f"{base}.apiVersion")]
    path = ref.get("fieldPath")
    if not path:
        return [_required(f"{base}.fieldPath")]
    path = str(path)
    m = _SUBSCRIPTED.match(path)
    problem = None
    if ref["apiVersion"] != "v1":
        problem = f"unsupported pod version: {ref['apiVersion']}"
    elif m and m.group(1) not in ("metadata.labels", "metadata.annotations"):
        problem = f"field label does not support subscript: {path}"
    elif not m and path not in _CONVERTIBLE + ("spec.host",):
        problem = f"field label not supported: {path}"
    if problem:
        return [_invalid(f"{base}.fieldPath", path, f"error converting fieldPath: {problem}")]
    if m:
        key = m.group(2)
        return _qualified_name(key.lower() if m.group(1) == "metadata.annotations" else key, base)
    internal = "spec.nodeName" if path == "spec.host" else path
    if internal not in ENV_FIELD_PATHS:
        return [_unsupported(f"{base}.fieldPath", internal, ENV_FIELD_PATHS)]
    return []


def _divisor(resource: str, divisor: Any, base: str) -> FieldErrors:
    """validateContainerResourceDivisor: only powers the kubelet can divide by, per resource."""
    if divisor in (None, "", 0, "0"):
        return []
    try:
        value = parse_quantity(divisor)
    except (QuantityError, TypeError):
        return [_invalid(f"{base}.divisor", divisor, "quantities must match the regular expression "
                         "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")]
    if value == 0:
        return []
    if resource.endswith(".cpu"):
        allowed, what, kind = _CPU_DIVISORS, "1m and 1", "the cpu resource"
    elif resource.endswith(".memory"):
        allowed, what, kind = _BYTE_DIVISORS, ", ".join(_BYTE_DIVISORS), "the memory resource"
    elif resource.endswith(".ephemeral-storage"):
        allowed, what = _BYTE_DIVISORS, ", ".join(_BYTE_DIVISORS)
        kind = "the local ephemeral storage resource"
    else:
        return []
    if value in {parse_quantity(a) for a in allowed}:
        return []
    shown = divisor if isinstance(divisor, str) else str(Fraction(value))
    return [_invalid(f"{base}.divisor", shown, f"only divisor's values {what} are supported with {kind}")]


def _resource_field_ref(ref: dict[str, Any], base: str) -> FieldErrors:
    resource = ref.get("resource")
    if not resource:
        return [_required(f"{base}.resource")]
    resource = str(resource)
    errs: FieldErrors = []
    hugepages = resource.startswith(("limits.hugepages-", "requests.hugepages-"))
    if resource not in RESOURCE_FIELDS and not hugepages:
        errs.append(_unsupported(f"{base}.resource", resource, RESOURCE_FIELDS))
    return errs + _divisor(resource, ref.get("divisor"), base)


def _key_selector(ref: dict[str, Any], base: str) -> FieldErrors:
    """validateConfigMapKeySelector / validateSecretKeySelector."""
    name = str(ref.get("name") or "")
    errs = [_invalid(f"{base}.name", name, m) for m in dns1123_subdomain(name)]
    key = ref.get("key")
    if not key:
        errs.append(_required(f"{base}.key"))
    else:
        errs += [_invalid(f"{base}.key", key, m) for m in config_map_key(str(key))]
    return errs


def _value_from(e: dict[str, Any], base: str) -> FieldErrors:
    src = e.get("valueFrom")
    if src is None:
        return []
    if not isinstance(src, dict):
        return [_invalid(base, src, "must be an object")]
    errs: FieldErrors = []
    checks = (("fieldRef", _field_ref), ("resourceFieldRef", _resource_field_ref),
              ("configMapKeyRef", _key_selector), ("secretKeyRef", _key_selector))
    sources = 0
    for key, check in checks:
        if isinstance(src.get(key), dict):
            sources += 1
            errs += check(src[key], f"{base}.{key}")
    if sources == 0:
        errs.append(_invalid(base, "", "must specify one of: `fieldRef`, `resourceFieldRef`, "
                             "`configMapKeyRef` or `secretKeyRef`"))
    elif e.get("value"):
        errs.append(_invalid(base, "", "may not be specified when `value` is not empty"))
    elif sources > 1:
        errs.append(_invalid(base, "", "may not have more than one field specified at a time"))
    return errs


def validate_env(container: dict[str, Any], base: str) -> FieldErrors:
    """Every error of `env` and `envFrom` in the container at `base`."""
    errs: FieldErrors = []
    for i, e in enumerate(container.get("env") or []):
        p = f"{base}.env[{i}]"
        if not isinstance(e, dict):
            errs.append(_invalid(p, e, "must be an object"))
            continue
        name = e.get("name")
        if not name:
            errs.append(_required(f"{p}.name"))
        else:
            errs += [_invalid(f"{p}.name", name, m) for m in relaxed_env_var_name(str(name))]
        errs += _value_from(e, f"{p}.valueFrom")
    for i, src in enumerate(container.get("envFrom") or []):
        p = f"{base}.envFrom[{i}]"
        if not isinstance(src, dict):
            errs.append(_invalid(p, src, "must be an object"))
            continue
        prefix = src.get("prefix")
        if prefix:
            errs += [_invalid(f"{p}.prefix", prefix, m) for m in relaxed_env_var_name(str(prefix))]
        sources = 0
        for key in ("configMapRef", "secretRef"):
            ref = src.get(key)
            if isinstance(ref, dict):
                sources += 1
                name = str(ref.get("name") or "")
                if not name:
                    errs.append(_required(f"{p}.{key}.name"))
                else:
                    errs += [_invalid(f"{p}.{key}.name", name, m) for m in dns1123_subdomain(name)]
        if sources == 0:
            errs.append(_invalid(f"{base}.envFrom", "", "must specify one of: `configMapRef` or `secretRef`"))
        elif sources > 1:
            errs.append(_invalid(f"{base}.envFrom", "",
                                 "may not have more than one field specified at a time"))
    return errs


def default_field_refs(container: dict[str, Any]) -> None:
    """SetDefaults_ObjectFieldSelector: a fieldRef without apiVersion means v1."""
    for e in container.get("env") or []:
        src = e.get("valueFrom") if isinstance(e, dict) else None
        ref = src.get("fieldRef") if isinstance(src, dict) else None
        if isinstance(ref, dict):
            ref.setdefault("apiVersion", "v1")
