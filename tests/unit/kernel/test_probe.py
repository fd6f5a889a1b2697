from kernel import probe


def test_cgroup_detection_matches_mounts():
    info = probe.detect_cgroups()
    assert info.version in ("v1", "v2")
    if info.version == "v1":
        assert "memory" in info.v1_controllers or "cpu" in info.v1_controllers
    else:
        assert info.v2_root


def test_report_shape_and_text():
    report = probe.probe_host()
    d = report.as_dict()
    assert set(d) == {"kernel", "cgroups", "features", "uses"}
    for name in probe.PROBES:
        assert name in d["features"]
        f = d["features"][name]
        # a missing feature always says why
        assert f["available"] or f["detail"]
    text = probe.format_report(report)
    assert "cgroups:" in text and "will use:" in text


def test_summary_words():
    hybrid = probe.CgroupInfo("v1", True, {"cpu": "/sys/fs/cgroup/cpu"}, "/sys/fs/cgroup/unified", ())
    assert hybrid.summary.startswith("v1 hybrid")
    assert "no controllers" in hybrid.summary
    v2 = probe.CgroupInfo("v2", False, {}, "/sys/fs/cgroup", ("cpu", "memory"))
    assert v2.summary.startswith("v2 (unified)")
