"""The leak check's link snapshot: a kernel fallback tunnel device is a leak only when left up."""

from tests.harness import hostsnap


def _fake_sysfs(monkeypatch, tmp_path, links: dict[str, int]) -> None:
    for name, flags in links.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "flags").write_text(f"{flags:#x}\n")
    real_listdir = hostsnap.os.listdir
    monkeypatch.setattr(hostsnap.os, "listdir",
                        lambda p: real_listdir(tmp_path) if p == "/sys/class/net" else real_listdir(p))
    real_path = hostsnap.Path
    monkeypatch.setattr(hostsnap, "Path",
                        lambda p: real_path(str(p).replace("/sys/class/net", str(tmp_path), 1)))


def test_fallback_device_down_is_not_listed(monkeypatch, tmp_path):
    _fake_sysfs(monkeypatch, tmp_path, {"lo": 0x9, "tunl0": 0x80, "sit0": 0x80, "br-x": 0x1002})
    assert hostsnap.links() == {"lo", "br-x"}


def test_fallback_device_left_up_is_listed(monkeypatch, tmp_path):
    _fake_sysfs(monkeypatch, tmp_path, {"lo": 0x9, "tunl0": 0xc1})
    assert hostsnap.links() == {"lo", "tunl0"}
