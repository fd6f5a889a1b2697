"""ConfigMap and Secret keys as kube-apiserver's IsConfigMapKey accepts them: a key may start with a digit."""

from __future__ import annotations

import pytest

from nodeagent.api.validation import validate


def _cm(key: str) -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "d"},
            "data": {key: "v"}}


@pytest.mark.parametrize("key", ["1st", "a.b", "-x", "_y", ".hidden", "A-Z_0.9"])
def test_valid_keys(key: str) -> None:
    assert validate(_cm(key), "ConfigMap", True) == []


@pytest.mark.parametrize("key", ["with space", "a/b", ".", "..", "..x", "k" * 254])
def test_invalid_keys(key: str) -> None:
    errs = validate(_cm(key), "ConfigMap", True)
    assert [e["field"] for e in errs] == [f"data[{key}]"]
