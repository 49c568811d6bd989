"""The type checker: mypy finds no error in the packages ``[tool.mypy]`` of ``pyproject.toml`` checks.

mypy names a module by its folder, and the top-level folders (``verifiers/``, ``trainers/``, ...) reach
``pivot_envs.*`` through the links in ``pivot_envs/``: the check runs on a copy of the sources in the layout an install has
(``pivot_envs/verifiers/...``), from the copy's root, with the repository's config. An error reads
``pivot_envs/verifiers/base.py:12: ...``: the file is ``verifiers/base.py`` here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.house.test_layering import installed_layout

ROOT = Path(__file__).resolve().parents[2]


def checked_layout(dest: Path) -> Path:
    """The package as ``pip install .`` lays it out (:func:`tests.house.test_layering.installed_layout`), with
    ``pyproject.toml`` (the checker's config) beside it; returns ``dest``."""
    installed_layout(dest)
    shutil.copy2(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_mypy_finds_no_error_in_the_checked_packages(tmp_path):
    site = checked_layout(tmp_path / "site")
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")], cwd=site,
                            capture_output=True, text=True, timeout=600)
    assert "No module named mypy" not in result.stderr, "the type checker is in the dev extra: pip install -e '.[dev]'"
    assert result.returncode == 0 and result.stdout.startswith("Success: no issues found"), \
        result.stdout[-8000:] + result.stderr[-2000:]
