"""The import contracts of ``.importlinter`` hold, on the package as a normal install lays it out.

The founding top-level folders (``verifiers/``, ``trainers/``, ...) reach the package through symlinks
(``pivot_envs/verifiers -> ../verifiers``), which import-linter's graph builder does not follow, so this test
copies the sources into the layout a wheel has (``pivot_envs/verifiers/...``, real files) and runs
``lint-imports`` on that copy. Imports inside functions count: the graph sees every import statement.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = ROOT / ".importlinter"


def installed_layout(dest: Path) -> Path:
    """The Python sources of the package, copied where ``pip install .`` puts them; returns the folder to
    put on ``sys.path``."""
    shutil.copytree(ROOT / "pivot_envs", dest / "pivot_envs", symlinks=False,  # the linked folders' files
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.jsonl*", "*.safetensors"))
    return dest


def sub_packages() -> list[str]:
    """The package's direct sub-packages (folders with an ``__init__.py``, linked ones included)."""
    return sorted(f"pivot_envs.{p.name}" for p in (ROOT / "pivot_envs").iterdir() if (p / "__init__.py").is_file())


def lint(site: Path) -> subprocess.CompletedProcess:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([str(lint_imports), str(CONTRACTS)], cwd=site, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return installed_layout(tmp_path_factory.mktemp("layout"))


def test_the_import_contracts_hold(site):
    assert (site / "pivot_envs" / "verifiers" / "base.py").exists()  # the mapped folders are in the copy
    result = lint(site)
    assert result.returncode == 0 and "0 broken" in result.stdout, result.stdout + result.stderr


def test_an_import_inside_a_function_that_breaks_a_contract_is_caught(site, tmp_path):
    """A verifier that imports the trainers, even only inside a function, breaks the library contract."""
    broken = installed_layout(tmp_path / "broken")
    (broken / "pivot_envs" / "verifiers" / "leak.py").write_text(
        "def train():\n    from pivot_envs.trainers import pivotrl\n\n    return pivotrl\n")
    result = lint(broken)
    assert result.returncode != 0, result.stdout
    assert "never import the trainers" in result.stdout and "BROKEN" in result.stdout
    assert "pivot_envs.verifiers.leak -> pivot_envs.trainers.pivotrl" in result.stdout, result.stdout


def test_python_started_in_the_repository_root_imports_every_sub_package_after_a_normal_install(site):
    """After ``pip install .`` the in-tree ``pivot_envs/`` shadows the installed package for Python started in
    the repository root (the current folder comes first on ``sys.path``); its sub-packages that live in
    top-level folders import through the symlinks, and ``python -m pivot_envs.cli --help`` runs. ``-S``
    leaves out the editable install: only the wheel-layout copy (``site``) and the dependencies are on the
    path."""
    import sysconfig

    deps = sysconfig.get_paths()["purelib"]
    names = sub_packages()
    assert {"pivot_envs.verifiers", "pivot_envs.trainers", "pivot_envs.cli"} <= set(names), names
    code = ("import importlib, pivot_envs\n"
            f"for name in {names!r}:\n"
            "    module = importlib.import_module(name)\n"
            "    assert module.__file__.startswith(pivot_envs.__path__[0].rsplit('/', 1)[0]), module.__file__\n"
            "print(pivot_envs.__file__)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), deps])}
    result = subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == str(ROOT / "pivot_envs" / "__init__.py")  # the in-tree package, as Python finds it
    cli = subprocess.run([sys.executable, "-S", "-m", "pivot_envs.cli", "--help"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0 and "Usage" in cli.stdout, cli.stdout + cli.stderr


def test_the_harness_package_sits_below_the_trainers_and_the_service(tmp_path):
    """``pivot_envs.harness`` is imported by the trainers and the service; it may import neither."""
    broken = installed_layout(tmp_path / "broken")
    (broken / "pivot_envs" / "harness" / "leak.py").write_text(
        "from pivot_envs.trainers import episode_rollouts\nfrom pivot_envs.serve import app\n")
    result = lint(broken)
    assert result.returncode != 0 and "harness endpoint sits below" in result.stdout, result.stdout
    assert "pivot_envs.harness.leak -> pivot_envs.trainers.episode_rollouts" in result.stdout, result.stdout
    assert "pivot_envs.harness.leak -> pivot_envs.serve.app" in result.stdout, result.stdout
