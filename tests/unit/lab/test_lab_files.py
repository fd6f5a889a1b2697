"""The Vagrant lab's files, checked on this machine: `vagrant validate` of the Vagrantfile under
several environments, and shellcheck of every script under vagrant/."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
LAB = REPO / "vagrant"
SCRIPTS = sorted(LAB.rglob("*.sh"))


def has_vagrant_libvirt() -> bool:
    return any(Path("/usr/share/rubygems-integration/all/specifications").glob("vagrant-libvirt-*.gemspec"))


def vagrant_validate(tmp_path: Path, *flags: str, **env: str) -> subprocess.CompletedProcess:
    if not shutil.which("vagrant"):
        pytest.skip("vagrant is not installed (Debian package `vagrant`, in the Makefile's APT_PACKAGES)")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LAB_", "VAGRANT_")) and k != "WORKERS"}
    full = {**clean, "VAGRANT_HOME": str(tmp_path / "vagrant.d"),
            "VAGRANT_DOTFILE_PATH": str(tmp_path / "dot"),
            "VAGRANT_CHECKPOINT_DISABLE": "1", **env}
    return subprocess.run(["vagrant", "validate", "--no-color", *(flags or ("--ignore-provider",))],
                          cwd=LAB, env=full,
                          capture_output=True, text=True, timeout=120)


def machines(out: str) -> list[str]:
    return re.findall(r"==> (\S+): Ignoring provider config", out)


def test_vagrantfile_validates_with_the_default_cp_and_two_workers(tmp_path):
    p = vagrant_validate(tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Vagrantfile validated successfully" in p.stdout
    assert machines(p.stdout) == ["cp", "worker1", "worker2"]
    assert not (LAB / ".vagrant").exists() or (LAB / ".vagrant").is_dir()


@pytest.mark.parametrize("driver", ["kvm", "qemu"])
def test_libvirt_provider_config_validates(tmp_path, driver):
    if not has_vagrant_libvirt():
        pytest.skip("vagrant-libvirt is not installed (make lab-deps installs it)")
    p = vagrant_validate(tmp_path, "--no-tty", VAGRANT_DEFAULT_PROVIDER="libvirt", LAB_LIBVIRT_DRIVER=driver,
                         LAB_STORAGE_POOL="lab", LAB_CPUS="1", LAB_MEMORY="1024")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Vagrantfile validated successfully" in p.stdout


@pytest.mark.parametrize("workers, expected", [("0", ["cp"]), ("3", ["cp", "worker1", "worker2", "worker3"])])
def test_workers_is_configurable(tmp_path, workers, expected):
    p = vagrant_validate(tmp_path, WORKERS=workers, LAB_BOX="local/debian12", LAB_LIBVIRT_DRIVER="qemu",
                         LAB_STORAGE_POOL="lab", LAB_CPUS="1", LAB_MEMORY="1024", LAB_TEST="1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert machines(p.stdout) == expected


@pytest.mark.parametrize("env, message", [
    ({"WORKERS": "two"}, 'WORKERS="two": expected a whole number >= 0'),
    ({"LAB_MEMORY": "64"}, "LAB_MEMORY=\"64\": expected a whole number >= 512"),
    ({"LAB_TEST": "yes"}, 'LAB_TEST="yes": expected 0 or 1'),
    ({"LAB_NET": "10.0"}, 'LAB_NET="10.0": expected three octets'),
])
def test_bad_settings_are_refused_with_the_reason(tmp_path, env, message):
    p = vagrant_validate(tmp_path, **env)
    assert p.returncode != 0
    assert message in p.stdout + p.stderr


def test_there_are_provisioning_scripts():
    names = {s.name for s in SCRIPTS}
    assert {"lib.sh", "common.sh", "server.sh", "agent.sh", "suite.sh"} <= names, names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(LAB)))
def test_script_is_shellcheck_clean_and_strict(script):
    if not shutil.which("shellcheck"):
        pytest.skip("shellcheck is not installed "
                    "(Debian package `shellcheck`, in the Makefile's APT_PACKAGES)")
    p = subprocess.run(["shellcheck", "-x", "--severity=style", script.name], cwd=script.parent,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    text = script.read_text()
    if script.name != "lib.sh":  # sourced, never run
        assert "\nset -euo pipefail\n" in text
        assert os.access(script, os.X_OK)
