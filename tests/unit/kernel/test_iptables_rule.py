"""kernel.iptables.backend: the node's one iptables backend rule."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from kernel import iptables


@pytest.fixture
def host(monkeypatch):
    """A fake host: where `iptables` is, what it really is, what --version says, whether nf_tables works."""
    state = {"which": "/usr/sbin/iptables", "real": "/usr/sbin/xtables-nft-multi", "version": "",
             "root": False, "nf_tables": True}
    monkeypatch.delenv(iptables.ENV, raising=False)
    monkeypatch.setattr(shutil, "which", lambda cmd: state["which"] if cmd == "iptables" else None)
    monkeypatch.setattr(os.path, "realpath", lambda p: state["real"] if p == state["which"] else p)
    monkeypatch.setattr(os, "access", lambda p, mode: False)
    monkeypatch.setattr(subprocess, "run",
                        lambda argv, **kw: subprocess.CompletedProcess(argv, 0, state["version"], ""))
    monkeypatch.setattr(os, "geteuid", lambda: 0 if state["root"] else 1000)
    monkeypatch.setattr(iptables, "nf_tables_kernel", lambda: state["nf_tables"])
    iptables._host_backend.cache_clear()
    yield state
    iptables._host_backend.cache_clear()


def test_the_host_commands_flavour_decides(host):
    assert iptables.backend() == "nft"
    iptables._host_backend.cache_clear()
    host["real"] = "/usr/sbin/xtables-legacy-multi"
    assert iptables.backend() == "legacy"


def test_a_single_mode_build_is_asked_for_its_version(host):
    host["real"] = host["which"]
    host["version"] = "iptables v1.8.9 (nf_tables)\n"
    assert iptables.backend() == "nft"
    iptables._host_backend.cache_clear()
    host["version"] = "iptables v1.6.1\n"  # before 1.8: legacy only
    assert iptables.backend() == "legacy"


def test_no_command_means_nft_but_not_on_a_kernel_without_nf_tables(host):
    host["which"] = None
    assert iptables.backend() == "nft"
    iptables._host_backend.cache_clear()
    host["root"], host["nf_tables"] = True, False
    assert iptables.backend() == "legacy"


def test_the_environment_overrides(host, monkeypatch):
    host["real"] = "/usr/sbin/xtables-legacy-multi"
    assert iptables.backend({"NODEAGENT_IPTABLES": "nft"}) == "nft"  # a CNI plugin's env
    monkeypatch.setenv(iptables.ENV, "nft")
    assert iptables.backend() == "nft"
    monkeypatch.setenv(iptables.ENV, "bogus")
    assert iptables.backend() == "legacy"
