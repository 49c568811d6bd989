"""vulture finds no dead code in the library: unused imports, unreachable code and unused arguments.

It runs at ``--min-confidence 61``, the level above vulture's guesses about functions, classes and attributes
(60%: registries, gymnasium, typer, pydantic and fastapi reach those by name, so most guesses there are
wrong). ``tests/house/vulture_whitelist.py`` names the few reports that are false, each with its reason.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pivot_envs"


def library_folders() -> list[Path]:
    """The package's own folder and the top-level folders linked into it (vulture does not follow links)."""
    return [PACKAGE, *sorted(p.resolve() for p in PACKAGE.iterdir() if p.is_symlink())]


def vulture(*paths: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vulture", "--min-confidence", "61", *map(str, paths)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_library_has_no_dead_code():
    folders = library_folders()
    assert ROOT / "verifiers" in folders and ROOT / "trainers" in folders, folders
    result = vulture(*folders, ROOT / "tests" / "house" / "vulture_whitelist.py")
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_unused_import_is_reported(tmp_path):
    module = tmp_path / "dead.py"
    module.write_text("import json\n\n\ndef f(x):\n    return 1\n")
    result = vulture(module)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "unused import 'json'" in result.stdout and "unused variable 'x'" in result.stdout, result.stdout
