"""The admin kubeconfig merged into a person's kubeconfig as kind and k3s do: entries of our name
replaced, every other kept, their current context left alone."""

from __future__ import annotations

import os
import stat

import pytest
import yaml

from nodeagent.apiserver.kubeconfig import KubeconfigError, UserKubeconfig, merge, render, write_for_user

ADMIN = render("https://127.0.0.1:6443", b"-----BEGIN CERTIFICATE-----\nx\n", "tok")


def names(cfg: dict, key: str) -> list[str]:
    return [e["name"] for e in cfg[key]]


def test_into_nothing_it_is_the_admin_kubeconfig_under_our_name():
    cfg = yaml.safe_load(merge(None, ADMIN, "nodeagent-ab12cd"))
    assert cfg["current-context"] == "nodeagent-ab12cd"
    assert names(cfg, "clusters") == names(cfg, "users") == names(cfg, "contexts") == ["nodeagent-ab12cd"]
    assert cfg["users"][0]["user"] == {"token": "tok"}
    assert cfg["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"
    assert cfg["contexts"][0]["context"] == {"cluster": "nodeagent-ab12cd", "user": "nodeagent-ab12cd"}


def test_a_persons_entries_and_current_context_are_kept():
    theirs = {"apiVersion": "v1", "kind": "Config", "current-context": "work",
              "clusters": [{"name": "work", "cluster": {"server": "https://w"}},
                           {"name": "nodeagent", "cluster": {"server": "https://stale"}}],
              "users": [{"name": "admin", "user": {"token": "theirs"}}],
              "contexts": [{"name": "work", "context": {"cluster": "work", "user": "admin"}}]}
    cfg = yaml.safe_load(merge(yaml.safe_dump(theirs), ADMIN, "nodeagent"))
    assert cfg["current-context"] == "work"
    assert names(cfg, "clusters") == ["work", "nodeagent"]
    assert cfg["clusters"][1]["cluster"]["server"] == "https://127.0.0.1:6443"  # the stale one replaced
    assert cfg["users"] == [{"name": "admin", "user": {"token": "theirs"}},  # their "admin" untouched
                            {"name": "nodeagent", "user": {"token": "tok"}}]


def test_an_empty_current_context_becomes_ours():
    cfg = yaml.safe_load(merge("apiVersion: v1\nkind: Config\ncurrent-context: ''\n", ADMIN, "nodeagent"))
    assert cfg["current-context"] == "nodeagent"


@pytest.mark.parametrize("text", ["clusters: [unclosed", "kind: Pod\n", "- a list\n"])
def test_what_is_not_a_kubeconfig_is_refused(text):
    with pytest.raises(KubeconfigError):
        merge(text, ADMIN, "nodeagent")


def test_made_0600_in_a_new_dir_and_merged_keeping_the_mode(tmp_path):
    target = UserKubeconfig(path=str(tmp_path / "home" / ".kube" / "config"))
    assert write_for_user(target, ADMIN) is True
    path = tmp_path / "home" / ".kube" / "config"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    path.chmod(0o640)
    assert write_for_user(target, ADMIN) is False
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert names(yaml.safe_load(path.read_text()), "contexts") == ["nodeagent"]


def test_a_broken_file_is_left_as_it_was(tmp_path):
    path = tmp_path / "config"
    path.write_text("clusters: [unclosed")
    with pytest.raises(KubeconfigError):
        write_for_user(UserKubeconfig(path=str(path)), ADMIN)
    assert path.read_text() == "clusters: [unclosed"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_owned_by_the_invoking_user(tmp_path):
    target = UserKubeconfig(path=str(tmp_path / "h" / ".kube" / "config"), uid=65534, gid=65534)
    write_for_user(target, ADMIN)
    for p in (tmp_path / "h" / ".kube", tmp_path / "h" / ".kube" / "config"):
        assert (p.stat().st_uid, p.stat().st_gid) == (65534, 65534)


def test_unmerge_takes_out_only_our_entries_and_our_current_context():
    from nodeagent.apiserver.kubeconfig import unmerge

    mine = {"apiVersion": "v1", "kind": "Config", "current-context": "work",
            "clusters": [{"name": "work", "cluster": {"server": "https://w"}}],
            "users": [{"name": "work", "user": {"token": "w"}}],
            "contexts": [{"name": "work", "context": {"cluster": "work", "user": "work"}}]}
    merged = merge(yaml.safe_dump(mine), ADMIN, "nodeagent")
    left = unmerge(merged, "nodeagent")
    assert left is not None and yaml.safe_load(left) == mine
    assert unmerge(left, "nodeagent") is None  # nothing of ours: the file is not rewritten
    only_ours = yaml.safe_load(unmerge(merge(None, ADMIN, "nodeagent"), "nodeagent") or "")
    assert "current-context" not in only_ours
    assert only_ours["clusters"] == only_ours["users"] == only_ours["contexts"] == []


def test_remove_for_user_keeps_mode_and_owner(tmp_path):
    from nodeagent.apiserver.kubeconfig import remove_for_user

    path = tmp_path / "config"
    target = UserKubeconfig(str(path), "nodeagent-ab12cd")
    assert not remove_for_user(target)  # no file: nothing to do
    write_for_user(target, ADMIN)
    os.chmod(path, 0o640)
    assert remove_for_user(target)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert yaml.safe_load(path.read_text())["contexts"] == []
    assert not remove_for_user(target)
    path.write_text("{not yaml")
    with pytest.raises(KubeconfigError):
        remove_for_user(target)
    assert path.read_text() == "{not yaml"
