"""The layering contracts (pyproject.toml's [tool.importlinter]) fail `make test` on a bad import.

`make test` runs `make lint`, which runs lint-imports. Each case copies the source tree and the config into
tmp, adds one import that breaks one contract, and lint-imports must exit non-zero naming that contract;
the untouched copy passes, so the failure is the import's and nothing else's.
"""

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS = {c["id"]: c["name"] for c in CONFIG["contracts"]}
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _tree(tmp_path: Path) -> Path:
    """The root packages (Python files only) and pyproject.toml, copied."""
    tree = tmp_path / "tree"
    for pkg in CONFIG["root_packages"]:
        shutil.copytree(ROOT / pkg, tree / pkg,
                        ignore=lambda d, names: [n for n in names
                                                 if not n.endswith(".py") and not (Path(d) / n).is_dir()
                                                 or n == "__pycache__"])
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    return tree


def _lint(tree: Path) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "400"}
    p = subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True,
                       timeout=120)
    return p.returncode, " ".join((p.stdout + p.stderr).split())


def _add_import(tree: Path, path: str, line: str) -> None:
    f = tree / path
    assert f.is_file(), f"{path} is not in the tree any more: pick another module for this case"
    f.write_text(f.read_text() + f"\n{line}  # a deliberately bad import\n")


def _with_kernel(tree: Path) -> None:
    """What adding the kernel layer takes: the package, and one line in root_packages."""
    (tree / "kernel").mkdir(exist_ok=True)
    (tree / "kernel" / "__init__.py").touch()
    if "kernel" not in CONFIG["root_packages"]:
        cfg = tree / "pyproject.toml"
        text = cfg.read_text()
        assert text.count("root_packages = [\n") == 1
        cfg.write_text(text.replace("root_packages = [\n", 'root_packages = [\n    "kernel",\n'))


def test_make_test_runs_the_contracts():
    out = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert any(ln.split()[:1] == [".venv/bin/lint-imports"] for ln in out.splitlines()), out


def test_the_tree_as_it_is_keeps_every_contract(tmp_path):
    code, out = _lint(_tree(tmp_path))
    assert code == 0, out
    for name in CONTRACTS.values():
        assert f"{name} KEPT" in out


@pytest.mark.parametrize("contract, path, line", [
    ("roots", "cni/errors.py", "import nodeagent.client"),
    ("roots", "cri/service.py", "import netproxy"),
    ("api-model", "nodeagent/api/quantity.py", "import nodeagent.pki"),
    ("components", "nodeagent/controllers/quota.py", "import nodeagent.apiserver.admission"),
    ("components", "nodeagent/client/rest.py", "import nodeagent.kubelet"),
    ("components", "nodeagent/scheduler/service.py", "import nodeagent.controllers"),
    ("proxies", "netproxy/proxy.py", "import cri.client"),
    ("cri-seam", "nodeagent/kubelet/kuberuntime.py", "import cri.runtime.errors"),
    ("acyclic", "cri/images/store.py", "import cri.images.puller"),
    ("acyclic", "nodeagent/scheduler/framework/interface.py", "import nodeagent.scheduler.queue"),
])
def test_a_bad_import_breaks_its_contract(tmp_path, contract, path, line):
    tree = _tree(tmp_path)
    _add_import(tree, path, line)
    code, out = _lint(tree)
    assert code != 0, out
    assert f"{CONTRACTS[contract]} BROKEN" in out, out


def test_the_kernel_layer_is_one_line_away(tmp_path):
    tree = _tree(tmp_path)
    _with_kernel(tree)
    code, out = _lint(tree)
    assert code == 0, out
    _add_import(tree, "kernel/__init__.py", "import nodeagent.api")
    code, out = _lint(tree)
    assert code != 0, out
    assert f"{CONTRACTS['roots']} BROKEN" in out, out
    assert f"{CONTRACTS['components']} BROKEN" in out, out  # the API model and the kernel: independent
