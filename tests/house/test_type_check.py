"""The type checker: mypy finds no error in the packages ``[tool.mypy]`` of ``pyproject.toml`` checks.

mypy names a module by its folder, and ``pyproject.toml`` maps top-level folders (``verifiers/``, ``trainers/``,
...) onto ``pivot_envs.*``: the check runs on a copy of the sources in the layout an install has
(``pivot_envs/verifiers/...``), from the copy's root, with the repository's config. An error reads
``pivot_envs/verifiers/base.py:12: ...``: the file is ``verifiers/base.py`` here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def installed_layout(dest: Path) -> Path:
    """The Python sources of the package where ``pip install .`` puts them, and ``pyproject.toml`` (the
    checker's config) beside them; returns ``dest``."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir = setuptools.get("package-dir", {"pivot_envs": "pivot_envs"})  # copytree copies a linked folder
    for package, folder in sorted(package_dir.items(), key=lambda kv: kv[0].count(".")):
        shutil.copytree(ROOT / folder, dest.joinpath(*package.split(".")), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.jsonl*", "*.json", "*.safetensors"))
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_mypy_finds_no_error_in_the_checked_packages(tmp_path):
    site = installed_layout(tmp_path / "site")
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")], cwd=site,
                            capture_output=True, text=True, timeout=600)
    assert "No module named mypy" not in result.stderr, "the type checker is in the dev extra: pip install -e '.[dev]'"
    assert result.returncode == 0 and result.stdout.startswith("Success: no issues found"), \
        result.stdout[-8000:] + result.stderr[-2000:]
