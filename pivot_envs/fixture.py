"""Writing a :class:`~pivot_envs.types.Fixture`'s files into a directory, safely.

The setup script is not run here: it runs inside a sandbox (see
``pivot_envs.verifiers.sandbox``) or by a data generator that owns its commands.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from pivot_envs.types import Fixture


def safe_relative(path: str) -> PurePosixPath:
    """Validate a fixture file path: relative, no ``..``; raises ValueError naming the path."""
    p = PurePosixPath(path)
    if p.is_absolute() or not p.parts or any(part in ("..", "") for part in p.parts):
        raise ValueError(f"fixture file path {path!r} must be relative to the workdir and must not contain '..'")
    return p


def write_files(fixture: Fixture, root: str | Path) -> None:
    """Write every file of ``fixture`` under ``root`` (creating parent folders)."""
    root = Path(root)
    for rel, content in fixture.files.items():
        target = root / safe_relative(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
