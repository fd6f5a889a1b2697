"""Which kubeconfig `up`/`server` merge their context into, and the one `nodeagent kubectl` hands kubectl."""

from __future__ import annotations

import argparse
import pwd
from pathlib import Path

import pytest

from nodeagent.commands import kubectl, user_kubeconfig
from nodeagent.layout import Layout


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    user_kubeconfig.add_arguments(p)
    return p.parse_args(list(argv))


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.delenv("SUDO_USER", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_the_default_instance_goes_to_the_persons_kube_config(home):
    t = user_kubeconfig.target(parse(), Layout.default())
    assert t is not None
    assert (t.path, t.context, t.uid) == (str(home / ".kube" / "config"), "nodeagent", None)


def test_a_throwaway_instance_only_when_asked(home, tmp_path):
    layout = Layout.for_data_dir(tmp_path / "d")
    assert user_kubeconfig.target(parse(), layout) is None
    t = user_kubeconfig.target(parse("--write-kubeconfig", "~/k.yaml"), layout)
    assert t is not None and t.path == str(home / "k.yaml") and t.context == f"nodeagent-{layout.tag}"


def test_no_write_kubeconfig(home):
    assert user_kubeconfig.target(parse("--no-write-kubeconfig"), Layout.default()) is None
    with pytest.raises(SystemExit):
        parse("--no-write-kubeconfig", "--write-kubeconfig", "x")


def test_under_sudo_the_invoking_users_home_and_ownership(home, monkeypatch):
    nobody = pwd.getpwnam("nobody")
    monkeypatch.setenv("SUDO_USER", "nobody")
    t = user_kubeconfig.target(parse(), Layout.default())
    assert t is not None
    assert (t.path, t.uid, t.gid) == (str(Path(nobody.pw_dir) / ".kube" / "config"),
                                      nobody.pw_uid, nobody.pw_gid)


def test_kubectl_kubeconfig_from_env_then_the_data_dir(tmp_path):
    assert kubectl.admin_kubeconfig({"KUBECONFIG": "/x"}) == "/x"
    d = tmp_path / "d"
    assert kubectl.admin_kubeconfig({"NODEAGENT_DATA_DIR": str(d)}) is None
    d.mkdir()
    (d / "admin.kubeconfig").write_text("")
    assert kubectl.admin_kubeconfig({"NODEAGENT_DATA_DIR": str(d)}) == str(d / "admin.kubeconfig")
