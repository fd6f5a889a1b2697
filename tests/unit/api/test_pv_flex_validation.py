"""A PersistentVolume's flexVolume names its driver (validateFlexVolumeSource)."""

from nodeagent.api.storage import validate_pv


def pv(source: dict) -> dict:
    return {"metadata": {"name": "v"},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain", **source}}


def test_flex_volume_driver_is_required():
    errs = validate_pv(pv({"flexVolume": {"options": {"a": "b"}}}))
    assert [(e["field"], e["message"]) for e in errs] == [("spec.flexVolume.driver", "Required value")]
    assert validate_pv(pv({"flexVolume": {"driver": "acme/disk"}})) == []
