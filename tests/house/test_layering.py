"""The import contracts of ``.importlinter`` hold, and they cover new code with no edit.

The contracts name packages and wildcards, never one module of a package: a new module is covered where it is
put. import-linter follows the committed links (``pivot_envs/verifiers -> ../verifiers``), so the contracts
are checked on the repository as it is, and on a copy in the layout a wheel has (``pivot_envs/verifiers/...``,
real files), which the tests that add a module write into. Imports inside functions count: the graph sees every
import statement.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTRACTS = ROOT / ".importlinter"
LAYERS = "The house's layers"
BELOW_THE_WORLDS = "Below the worlds"
DOMAIN_WORLDS = "A domain folder's world imports"


def installed_layout(dest: Path) -> Path:
    """The Python sources of the package, copied where ``pip install .`` puts them; returns the folder to
    put on ``sys.path``."""
    shutil.copytree(ROOT / "pivot_envs", dest / "pivot_envs", symlinks=False,  # the linked folders' files
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.jsonl*", "*.safetensors"))
    return dest


def sub_packages() -> list[str]:
    """The package's direct sub-packages (folders with an ``__init__.py``, linked ones included)."""
    return sorted(f"pivot_envs.{p.name}" for p in (ROOT / "pivot_envs").iterdir() if (p / "__init__.py").is_file())


def lint(site: Path) -> tuple[int, str]:
    """``lint-imports`` on the package found in ``site``: its exit status and its report, one line (it wraps
    long lines)."""
    lint_imports = Path(sys.executable).with_name("lint-imports")
    env = {**os.environ, "PYTHONPATH": str(site), "COLUMNS": "300"}
    result = subprocess.run([str(lint_imports), "--no-cache", str(CONTRACTS)], cwd=site, env=env,
                            capture_output=True, text=True, timeout=300)
    return result.returncode, " ".join((result.stdout + result.stderr).split())


def write(site: Path, path: str, text: str) -> None:
    target = site / "pivot_envs" / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def broken_contract(report: str, name: str) -> str:
    """The part of the report that explains why the contract named ``name`` is broken."""
    start = report.index(name, report.index("Broken contracts"))
    following = [report.find(other, start + 1) for other in (LAYERS, BELOW_THE_WORLDS, DOMAIN_WORLDS)]
    return report[start:min([i for i in following if i > 0], default=len(report))]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    return installed_layout(tmp_path_factory.mktemp("layout"))


def test_the_import_contracts_hold_on_the_repository_and_on_the_wheel_layout(site):
    for where in (ROOT, site):
        status, report = lint(where)
        assert status == 0 and "0 broken" in report, report
    assert (site / "pivot_envs" / "verifiers" / "base.py").exists()  # the linked folders are in the copy
    # the layers contract requires every layer to exist: the linked sub-packages were found through the links
    assert "The house's layers, top to bottom: each imports only the layers below it KEPT" in lint(ROOT)[1]


@pytest.fixture(scope="module")
def new_modules_across_layers(tmp_path_factory) -> str:
    """The report on a copy with new modules, none named in ``.importlinter``, that import upwards."""
    site = installed_layout(tmp_path_factory.mktemp("across"))
    write(site, "verifiers/zz.py", "def train():\n    from pivot_envs.trainers import pivotrl\n\n    return pivotrl\n")
    write(site, "harness/leak.py", "from pivot_envs.trainers import episode_rollouts\nfrom pivot_envs.serve import app\n")
    write(site, "zz_new.py", "VALUE = 1\n")
    status, report = lint(site)
    assert status != 0, report
    return broken_contract(report, LAYERS)


def test_a_new_module_in_a_package_that_imports_upwards_breaks_the_layers(new_modules_across_layers):
    """A new verifier module importing the trainers, only inside a function, with no edit of the contracts."""
    assert "pivot_envs.verifiers.zz -> pivot_envs.trainers.pivotrl" in new_modules_across_layers


def test_the_harness_sits_below_the_trainers_and_the_service(new_modules_across_layers):
    """``pivot_envs.harness`` is imported by the trainers and the service; it may import neither."""
    assert "pivot_envs.harness.leak -> pivot_envs.trainers.episode_rollouts" in new_modules_across_layers
    assert "pivot_envs.harness.leak -> pivot_envs.serve.app" in new_modules_across_layers


def test_a_new_module_directly_under_the_package_must_be_placed_in_a_layer(new_modules_across_layers):
    assert "not listed as layers: - pivot_envs.zz_new" in new_modules_across_layers
    assert "add its name to the layer it belongs to in .importlinter" in new_modules_across_layers


@pytest.fixture(scope="module")
def tool_code_leaks(tmp_path_factory) -> str:
    """The report on a copy in which a generator, a new module of a new domain folder and a world import a
    verifier helper, and a new module of the sandbox imports the worlds."""
    site = installed_layout(tmp_path_factory.mktemp("tool_code"))
    leak = "from pivot_envs.verifiers.helpers import information  # noqa: F401\n"
    generator = site / "pivot_envs" / "envs_data" / "search" / "generator.py"
    generator.write_text(generator.read_text() + leak)
    write(site, "envs_data/zz_domain/__init__.py", "")
    write(site, "envs_data/zz_domain/catalog.py", leak + "from pivot_envs.envs_data.swe import repos  # noqa: F401\n")
    world = site / "pivot_envs" / "envs_data" / "terminal" / "world.py"
    world.write_text(world.read_text() + leak)
    write(site, "verifiers/sandbox/zz.py", "from pivot_envs.worlds import base  # noqa: F401\n")
    status, report = lint(site)
    assert status != 0, report
    assert "0 broken" not in report and f"{LAYERS}, top to bottom: each imports only the layers below it KEPT" in report
    return report


def test_a_generator_importing_a_verifier_helper_breaks_below_the_worlds(tool_code_leaks):
    broken = broken_contract(tool_code_leaks, BELOW_THE_WORLDS)
    assert "pivot_envs.envs_data.search.generator -> pivot_envs.verifiers.helpers.information" in broken, broken


def test_a_new_domain_folder_s_tool_code_is_covered_with_no_edit(tool_code_leaks):
    broken = broken_contract(tool_code_leaks, BELOW_THE_WORLDS)
    assert "pivot_envs.envs_data.zz_domain.catalog -> pivot_envs.verifiers.helpers.information" in broken, broken
    assert "pivot_envs.envs_data.zz_domain.catalog -> pivot_envs.envs_data.swe.repos" in broken, broken  # another folder


def test_the_sandbox_sits_below_the_worlds(tool_code_leaks):
    broken = broken_contract(tool_code_leaks, BELOW_THE_WORLDS)
    assert "pivot_envs.verifiers.sandbox.zz -> pivot_envs.worlds.base" in broken, broken


def test_a_world_importing_a_verifier_helper_breaks_its_contract(tool_code_leaks):
    broken = broken_contract(tool_code_leaks, DOMAIN_WORLDS)
    assert "pivot_envs.envs_data.terminal.world -> pivot_envs.verifiers.helpers.information" in broken, broken


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
